//! Addresses a tool may not reach unless the operator names them: loopback,
//! private, link-local, and every other range that is not the public
//! internet, in every encoding that smuggles one address inside another.
//!
//! Threat model: a tool that may reach "the internet" must not reach the
//! machine it runs on, the cloud's metadata service (169.254.169.254), or the
//! operator's internal network by writing such an address, by an IPv6 form
//! that embeds it (`::ffff:127.0.0.1`, `64:ff9b::a9fe:a9fe`, `2002:7f00:1::`),
//! or by a name whose answer points there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::grant::Cidr;

/// Why `ip` is not on the public internet, or `None` when it is. An IPv6
/// address that embeds an IPv4 one (mapped, compatible, NAT64, 6to4) is
/// judged by the address it embeds.
pub(crate) fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "unspecified (0.0.0.0/8)",
        (10, ..) => "private (10.0.0.0/8)",
        (100, 64..=127, _) => "carrier-grade NAT (100.64.0.0/10)",
        (127, ..) => "loopback (127.0.0.0/8)",
        (169, 254, _) => "link-local (169.254.0.0/16, the cloud metadata range)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) => "documentation (192.0.2.0/24)",
        (192, 88, 99) => "6to4 relay anycast (192.88.99.0/24)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (198, 51, 100) => "documentation (198.51.100.0/24)",
        (203, 0, 113) => "documentation (203.0.113.0/24)",
        (224..=239, ..) => "multicast (224.0.0.0/4)",
        (255, 255, 255) if ip == Ipv4Addr::BROADCAST => "broadcast",
        (240..=255, ..) => "reserved (240.0.0.0/4)",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return special_v4(v4).map(|_| embedded_reason(ip));
    }
    let s = ip.segments();
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified (::)",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback (::1)",
        [0x0064, 0xff9b, 0x0001, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x0100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [x, ..] if x & 0xfe00 == 0xfc00 => "unique-local (fc00::/7)",
        [x, ..] if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [x, ..] if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        [x, ..] if x & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        // Only 2000::/3 is global unicast; the rest is reserved or not yet
        // assigned.
        [x, ..] if x & 0xe000 != 0x2000 => "outside global unicast (2000::/3)",
        [0x2001, 0x0db8, ..] => "documentation (2001:db8::/32)",
        [0x2001, 0x0000..=0x01ff, ..] => "IETF protocol assignments and Teredo (2001::/23)",
        [0x3fff, 0x0000..=0x0fff, ..] => "documentation (3fff::/20)",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 one carries: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4
/// (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(low()),
        // IPv4-translated (SIIT), `::ffff:0:a.b.c.d`.
        [0, 0, 0, 0, 0xffff, 0, ..] => Some(low()),
        // `::` and `::1` are IPv6's own.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, ..] => Some(low()),
        [0x0064, 0xff9b, 0, 0, 0, 0, ..] => Some(low()),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

fn embedded_reason(ip: Ipv6Addr) -> &'static str {
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, ..] => "a special IPv4 address in IPv4-mapped form",
        [0, 0, 0, 0, 0xffff, 0, ..] => "a special IPv4 address in IPv4-translated form",
        [0x0064, ..] => "a special IPv4 address in NAT64 form",
        [0x2002, ..] => "a special IPv4 address in 6to4 form",
        _ => "a special IPv4 address in IPv4-compatible form",
    }
}

/// Whether `ip` may be connected to: a public address, or one inside a
/// range the operator let through.
pub(crate) fn allowed(ip: IpAddr, allow_private: &[Cidr]) -> bool {
    special(ip).is_none() || allow_private.iter().any(|cidr| cidr.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn every_special_range_is_refused_in_every_encoding() {
        for text in [
            "0.0.0.0",
            "10.0.0.5",
            "100.64.0.1",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001::1",
            "2001:db8::1",
            "3fff::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
            "::ffff:0:7f00:1",
            "::ffff:0:a9fe:a9fe",
            "5f00::1",
            "400::1",
        ] {
            assert!(special(ip(text)).is_some(), "{text} passed as public");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for text in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.169.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2a00:1450::1",
        ] {
            assert_eq!(special(ip(text)), None, "{text}");
        }
    }

    #[test]
    fn the_operator_can_let_a_private_range_through() {
        let ten: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(allowed(ip("10.1.2.3"), std::slice::from_ref(&ten)));
        assert!(!allowed(ip("192.168.1.1"), std::slice::from_ref(&ten)));
        assert!(allowed(ip("8.8.8.8"), &[]));
        assert!(!allowed(ip("127.0.0.1"), &[]));
    }
}
