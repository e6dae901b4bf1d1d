fn main() -> std::process::ExitCode {
    bootstream::cli::main()
}
