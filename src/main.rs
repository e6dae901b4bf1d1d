// The control plane parses and writes JSON all day (Agents, inventories, step replies): with glibc's
// allocator, malloc and free were a third of the server's CPU in the fleet benchmark.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    keep_the_heap_off_huge_pages();
    bootstream::cli::main()
}

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` says otherwise.
///
/// mimalloc asks for huge pages on its heap (`MADV_HUGEPAGE`), and RHEL's default (`enabled=always`)
/// gives them unasked. The heap grows as InfraEnvs and NMStateConfigs are added, and with huge pages
/// the first touch of each new 2 MiB zeroes all of it in one page fault, inside whichever request
/// allocated there. In the serve benchmark, 5–8% of new InfraEnvs' builds took 5–10 ms longer, and
/// the p99 from an InfraEnv's create to its image's first byte was 11.7–13.2 ms with huge pages and
/// 4.9–5.9 ms without, p50 alike (benches/HISTORY.md, sixth round). Served image bytes come from the page
/// cache and are not mapped, so this costs streaming nothing.
fn keep_the_heap_off_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: PR_SET_THP_DISABLE takes integers and changes only this process's (and its children's)
    // huge page policy. A kernel without it (before 3.15) answers EINVAL, and nothing changes.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
