//! One-line bodies (`{ Ok(1) }`) under `#![deny(warnings)]`, for every attribute and mode, on
//! free fns, methods and generic fns: the expansion adds no warning of its own (issue 37: it
//! used to warn "unnecessary braces around block return value" and suggest deleting the fn's
//! own braces), and a body's inner attribute stays the body's.
#![deny(warnings)]

use std::fmt::Display;

use distlock::{distributed_lock, read_lock, semaphore, write_lock, Client, Error};

// rustfmt would put each body on lines of its own, where the lint never fired.
#[rustfmt::skip]
mod one_line {
    use super::*;

    #[distributed_lock(key = "one", client = locks)]
    async fn setnx(locks: &Client) -> Result<u32, Error> { Ok(1) }

    #[distributed_lock(key = "one", client = locks, mode = "reentrant")]
    async fn reentrant(locks: &Client) -> Result<u32, Error> { Ok(1) }

    #[distributed_lock(key = "one", client = locks, mode = "redlock")]
    async fn redlock(locks: &Client) -> Result<u32, Error> { Ok(1) }

    #[distributed_lock(key = ["a:<id>", "b:<id>"], client = locks)]
    async fn list(locks: &Client, id: u32) -> Result<u32, Error> { Ok(id) }

    #[read_lock(key = "doc:<id>", client = locks)]
    async fn read(locks: &Client, id: u32) -> Result<u32, Error> { Ok(id) }

    #[write_lock(key = "doc:<id>", client = locks)]
    async fn write(locks: &Client, id: u32) -> Result<u32, Error> { Ok(id) }

    #[semaphore(key = "export", permits = 2, client = locks)]
    async fn permit(locks: &Client) -> Result<u32, Error> { Ok(1) }

    #[distributed_lock(key = "skip", client = locks, on_busy = "skip")]
    async fn skip(locks: &Client) -> Result<u32, Error> { Ok(1) }

    #[distributed_lock(key = "log", client = locks, on_error = "log")]
    async fn logged(locks: &Client) -> u32 { 1 }

    #[distributed_lock(key = "log", client = locks, on_error = "log")]
    async fn unit(locks: &Client) {}

    #[distributed_lock(key = "empty", client = locks)]
    async fn empty_ok(locks: &Client) -> Result<(), Error> { Ok(()) }

    #[distributed_lock(key = "item:<id>", client = locks)]
    async fn generic<T: Display + Send + Sync>(locks: &Client, id: T) -> Result<String, Error> { Ok(id.to_string()) }

    #[write_lock(key = "item:<id>", client = locks)]
    async fn generic_where<T>(locks: &Client, id: T) -> Result<T, Error> where T: Display + Send + Sync { Ok(id) }

    #[distributed_lock(key = "inner", client = locks)]
    async fn inner_attribute(locks: &Client) -> Result<u32, Error> { #![allow(unused_variables)] let x = 1; Ok(1) }

    #[distributed_lock(key = "question", client = locks)]
    async fn question(locks: &Client) -> Result<u32, Error> { setnx(locks).await }

    struct Account {
        id: u64,
        locks: Client,
    }

    impl Account {
        #[distributed_lock(key = "account:<self.id>", client = self.locks)]
        async fn by_ref(&self) -> Result<u64, Error> { Ok(self.id) }

        #[write_lock(key = "account:<self.id>", client = self.locks.clone())]
        async fn by_mut(&mut self) -> Result<u64, Error> { Ok(self.id) }

        #[read_lock(key = "account:<self.id>", client = self.locks.clone())]
        async fn by_value(self) -> Result<u64, Error> { Ok(self.id) }

        #[semaphore(key = "account:<self.id>", permits = 3, client = &self.locks)]
        async fn generic_method<T: Into<u64> + Send>(&self, extra: T) -> Result<u64, Error> { Ok(self.id + extra.into()) }
    }

    fn assert_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    fn check(locks: &Client, mut account: Account) {
        assert_send(&setnx(locks));
        assert_send(&reentrant(locks));
        assert_send(&redlock(locks));
        assert_send(&list(locks, 1));
        assert_send(&read(locks, 1));
        assert_send(&write(locks, 1));
        assert_send(&permit(locks));
        assert_send(&skip(locks));
        assert_send(&logged(locks));
        assert_send(&unit(locks));
        assert_send(&empty_ok(locks));
        assert_send(&generic(locks, 1));
        assert_send(&generic_where(locks, "x"));
        assert_send(&inner_attribute(locks));
        assert_send(&question(locks));
        assert_send(&account.by_ref());
        assert_send(&account.generic_method(1u8));
        assert_send(&account.by_mut());
        assert_send(&account.by_value());
    }
}

fn main() {}
