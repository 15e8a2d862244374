//! systemd's readiness protocol (sd_notify(3)) for a `Type=notify` unit: one
//! datagram per state change to the unix socket named by `NOTIFY_SOCKET`, a
//! path or an abstract name written `@name`. Telling the service manager is
//! best effort: a failure is logged and never stops the driver.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where the service manager listens; without `NOTIFY_SOCKET` every call is
/// a no-op.
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    socket: Option<String>,
}

impl Notifier {
    pub fn new(socket: Option<String>) -> Notifier {
        Notifier { socket }
    }

    /// The driver serves: systemd finishes starting the unit (and starts
    /// the units ordered after it, kubelet among them).
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// Shutdown has begun.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={status}"));
    }

    /// A line for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }

    fn send(&self, state: &str) {
        let Some(socket) = &self.socket else { return };
        if let Err(e) = send(socket, state) {
            log::warn!("NOTIFY_SOCKET {socket}: cannot tell the service manager {state:?}: {e}");
        }
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let addr = match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let sent = UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        return Err(std::io::Error::other("datagram truncated"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn an_abstract_socket_receives_each_state() {
        let name = format!("lnc-notify-unit-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        let notifier = Notifier::new(Some(format!("@{name}")));
        notifier.ready("serving");
        assert_eq!(receive(&socket), "READY=1\nSTATUS=serving");
        notifier.stopping("draining");
        assert_eq!(receive(&socket), "STOPPING=1\nSTATUS=draining");
    }

    #[test]
    fn nobody_listening_is_not_an_error() {
        Notifier::new(Some("/nonexistent/notify.sock".into())).ready("serving");
        Notifier::new(None).ready("serving");
    }
}
