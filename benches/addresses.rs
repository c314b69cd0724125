//! ns per request for finding and grouping a client address (docs/design.md §8), beside the
//! obvious way to write the same identifier — `format!` through `Display`, one `String` a
//! request — in the same run.
//!
//! Rows: the identifier of an IPv6 address grouped by `/64` and of an IPv4 address (the work a
//! front end does per request once it has the address), the anchor, and the client behind two
//! trusted proxies read from `X-Forwarded-For` and from `Forwarded` (three hops, two trusted).

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgelimit::{AddressGrouping, ClientAddress, ProxyHeader, TrustedProxies};

fn grouping(c: &mut Criterion) {
    let mut group = c.benchmark_group("client_identifier");
    group.throughput(Throughput::Elements(1));
    let by64 = AddressGrouping::default();
    let v6: IpAddr = "2a01:4f8:c17:3f9a:1234:5678:9abc:def0".parse().unwrap();
    let v4: IpAddr = "203.0.113.7".parse().unwrap();
    group.bench_function("ipv6_by_64", |b| {
        b.iter(|| black_box(by64.identifier(black_box(v6))).len())
    });
    group.bench_function("ipv4", |b| {
        b.iter(|| black_box(by64.identifier(black_box(v4))).len())
    });
    group.bench_function("ipv6_by_64_format_display", |b| {
        b.iter(|| {
            let IpAddr::V6(ip) = black_box(v6) else {
                unreachable!()
            };
            let network = Ipv6Addr::from(u128::from(ip) & !(u128::MAX >> 64));
            black_box(format!("{network}/64")).len()
        })
    });
    group.finish();
}

fn resolving(c: &mut Criterion) {
    let mut group = c.benchmark_group("client_behind_proxies");
    group.throughput(Throughput::Elements(1));
    let proxies: TrustedProxies = "10.0.0.0/8, 2001:db8:ffff::/48".parse().unwrap();
    let peer: IpAddr = "10.0.0.1".parse().unwrap();
    let xff = ClientAddress::behind(proxies.clone(), ProxyHeader::XForwardedFor);
    let xff_lines = ["203.0.113.9, 198.51.100.7, 10.1.2.3"];
    group.bench_function("x_forwarded_for", |b| {
        b.iter(|| black_box(xff.resolve(black_box(peer), black_box(&xff_lines))))
    });
    let forwarded = ClientAddress::behind(proxies, ProxyHeader::Forwarded);
    let forwarded_lines =
        [r#"for=203.0.113.9, for="[2001:db8:cafe::17]:4711";proto=https, for=10.1.2.3"#];
    group.bench_function("forwarded", |b| {
        b.iter(|| black_box(forwarded.resolve(black_box(peer), black_box(&forwarded_lines))))
    });
    group.finish();
}

criterion_group!(benches, grouping, resolving);
criterion_main!(benches);
