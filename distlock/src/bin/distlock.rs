//! `distlock inspect|list|unlock`: the operator's view of the locks (feature `cli`).
//!
//! ```text
//! cargo install distlock --features cli
//! distlock --url redis://10.0.0.5:6379 inspect order:42
//! distlock unlock order:42 --reason "holder stuck in a GC loop, ticket 1234"
//! ```

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (text, code) = distlock::__cli::run(&args).await;
    if code == 0 {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    std::process::exit(code);
}
