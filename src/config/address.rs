//! Where the driver listens: the CSI socket ([`Endpoint`]) and an HTTP
//! listener ([`ListenAddress`]). Plain values, parsed in `parse.rs`; this
//! file must not read settings or bind anything.

use std::fmt;
use std::path::PathBuf;

/// Where the CSI socket listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

/// Where an HTTP listener binds: an IP address and port, or only a port
/// for every address (`:29662`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddress {
    pub ip: Option<std::net::IpAddr>,
    pub port: u16,
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            None => write!(f, ":{}", self.port),
            Some(ip) => write!(f, "{}", std::net::SocketAddr::new(ip, self.port)),
        }
    }
}
