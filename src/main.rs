// The control plane parses and writes JSON all day (Agents, inventories, step replies): with glibc's
// allocator, malloc and free were a third of the server's CPU in the fleet benchmark.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    bootstream::cli::main()
}
