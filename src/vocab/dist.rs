//! What a backend needs to create a process group: the rendezvous plan core
//! reads from torchrun's environment.

use std::time::Duration;

/// The store the ranks rendezvous through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// A c10d TCPStore at host:port; `server` when this process hosts it.
    Tcp { host: String, port: u16, server: bool },
    /// A c10d FileStore: one host, no ports.
    File { path: String },
}

/// Everything the backend needs to create the process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub world: i64,
    pub rank: i64,
    pub store: Store,
    /// Key prefix in the store, so restarts and later groups never read old keys.
    pub prefix: String,
    pub timeout: Duration,
    /// GLOO_SOCKET_IFNAME's interfaces, one Gloo device each; empty means bind to `bind_host`.
    pub interfaces: Vec<String>,
    /// The local address that reaches the master (no hostname lookup of our own).
    pub bind_host: String,
}
