//! Ports for servers that a test stops and starts again on the same address (a broker restart,
//! a model server coming back).
//!
//! A port from `bind(0)` is in the kernel's ephemeral range, which is also where every outgoing
//! connection on the machine takes its local port. Once the server stops, any client (another
//! test's, or a client reconnecting to that very port, which Linux can connect to itself) may
//! take the port, and the server cannot listen on it again: a broker restart in CI failed so.
//! Ports below the ephemeral range are never handed out that way.
#![allow(clippy::expect_used)]

use std::net::{SocketAddr, TcpListener};

/// Where the search starts: above the well-known and most registered service ports.
const LOWEST: u16 = 20_000;

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// The first of `count` consecutive loopback ports, all free now and all below the ephemeral
/// range, picked at random so that tests running at once do not pick the same ones.
pub fn restartable_ports(count: u16) -> u16 {
    let top = ephemeral_start().saturating_sub(count);
    assert!(
        top > LOWEST,
        "the ephemeral port range starts too low for restartable ports"
    );
    for _ in 0..200 {
        let random = u16::from_le_bytes(
            uuid::Uuid::new_v4().as_bytes()[..2]
                .try_into()
                .expect("two bytes"),
        );
        let first = LOWEST + random % (top - LOWEST);
        let free = (first..first + count).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return first;
        }
    }
    panic!("no {count} free consecutive ports below the ephemeral range");
}

/// A free loopback address below the ephemeral range (see the module's header).
pub fn restartable_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], restartable_ports(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restartable_ports_are_free_and_below_the_ephemeral_range() {
        let first = restartable_ports(3);
        assert!(first >= LOWEST && first + 3 <= ephemeral_start());
        for p in first..first + 3 {
            TcpListener::bind(("127.0.0.1", p)).expect("free");
        }
    }
}
