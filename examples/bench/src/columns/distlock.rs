//! The distlock column (and `distlock fenced`): `Client::lock`.

use std::time::Duration;

use super::{BoxFut, Column, Held, Release, TTL};

pub struct Distlock {
    pub client: distlock::Client,
    /// Mint a fencing token with every acquisition (`distlock fenced`).
    pub fencing: bool,
}

impl Column for Distlock {
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let request = self.client.lock(key).ttl(TTL).wait(wait);
            let guard = request.fencing(self.fencing).acquire().await;
            guard
                .map(|g| Box::new(g) as Held)
                .map_err(|e| e.to_string())
        })
    }
}

impl Release for distlock::Guard {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move { (*self).release().await.map_err(|e| e.to_string()) })
    }
}
