//! The expansion is warning-free under `#![deny(warnings)]`, uses only `::distlock::` paths,
//! and is unaffected by user items named like the ones it uses (`Error`, `Result`, `Option`,
//! `Some`, `Duration`, `Client`, `core`, `std`, `distlock_private`) or by locals named like
//! its own.
#![deny(warnings, clippy::all)]
#![allow(non_camel_case_types, dead_code)]

mod core {}
mod std {}

#[derive(Debug)]
pub struct Error;

impl ::std::convert::From<::distlock::Error> for Error {
    fn from(_: ::distlock::Error) -> Self {
        Error
    }
}

pub type Result<T> = ::core::result::Result<T, Error>;
pub struct Option;
pub struct Duration;
pub struct Client;
pub struct Some;
pub fn format_args() {}

#[distlock::distributed_lock(key = "order:<id>", ttl = "10s", on_busy = "skip")]
pub async fn pay(id: u64) -> Result<()> {
    let __distlock_key = id;
    let __distlock_client = __distlock_key + 1;
    let _ = __distlock_client;
    Ok(())
}

#[distlock::write_lock(key = "fixed", watchdog = false, max_hold = "1s")]
pub async fn fixed(value: ::std::string::String) -> Result<usize> {
    Ok(value.len())
}

fn main() {
    drop(pay(1));
    drop(fixed(::std::string::String::new()));
}
