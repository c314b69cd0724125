//! Which client a request is counted as: the peer, whatever forwarding headers it sends, unless
//! the peer is a trusted proxy — then the right-most hop no trusted proxy wrote; IPv6 clients by
//! their network (`ipv6_prefix`, 64 by default).

mod common;

use axum::http::StatusCode;
use common::{App, Req};
use edgelimit::net::{ClientAddress, ProxyHeader, TrustedProxies};
use edgelimit_tower::{Config, ConfigBuilder, LimitBuilder, RuleBuilder};

/// One request a minute per client address on `/api/`.
fn per_ip(config: ConfigBuilder) -> Config {
    config
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(LimitBuilder::new("per-ip", "fixed 1/1m")),
        )
        .build()
        .unwrap()
}

fn behind(header: ProxyHeader) -> ClientAddress {
    ClientAddress::behind(
        TrustedProxies::parse(["10.0.0.0/8", "loopback"]).unwrap(),
        header,
    )
}

/// What a client behind nothing might send to pass as someone else.
const SPOOFS: [(&str, &str); 5] = [
    ("x-forwarded-for", "198.51.100.1"),
    ("forwarded", "for=198.51.100.2"),
    ("x-real-ip", "198.51.100.3"),
    ("cf-connecting-ip", "198.51.100.4"),
    ("true-client-ip", "198.51.100.5"),
];

#[tokio::test]
async fn spoofed_headers_from_untrusted_peers_change_nothing() {
    for client in [ClientAddress::direct(), behind(ProxyHeader::XForwardedFor)] {
        let app = App::new(per_ip(ConfigBuilder::new()), |b| {
            b.client_address(client.clone())
        });
        let peer = "203.0.113.7";
        assert_eq!(
            app.send(Req::get("/api/x").from(peer).build()).await.status,
            StatusCode::OK
        );
        // Every spoof, alone and all at once, is still the peer: denied.
        for (name, value) in SPOOFS {
            let spoofed = Req::get("/api/x").from(peer).header(name, value);
            assert_eq!(
                app.send(spoofed.build()).await.status,
                StatusCode::TOO_MANY_REQUESTS,
                "{name}: {value} from an untrusted peer ({client:?})"
            );
        }
        let mut all = Req::get("/api/x").from(peer);
        for (name, value) in SPOOFS {
            all = all.header(name, value);
        }
        assert_eq!(
            app.send(all.build()).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        // And the addresses they named were never charged.
        for (_, value) in SPOOFS {
            let address = value.trim_start_matches("for=");
            assert_eq!(
                app.send(Req::get("/api/x").from(address).build())
                    .await
                    .status,
                StatusCode::OK,
                "{address}"
            );
        }
    }
}

#[tokio::test]
async fn behind_trusted_proxies_the_client_is_the_rightmost_hop_they_did_not_write() {
    let app = App::new(per_ip(ConfigBuilder::new()), |b| {
        b.client_address(behind(ProxyHeader::XForwardedFor))
    });
    let via_proxies = |chain: &str| {
        Req::get("/api/x")
            .from("10.0.0.1")
            .header("x-forwarded-for", chain)
            .build()
    };
    // The client 203.0.113.9, through two proxies; whatever it prepended is not believed.
    let first = app.send(via_proxies("203.0.113.9, 10.0.0.2")).await;
    assert_eq!(first.status, StatusCode::OK);
    for spoofed in [
        "1.1.1.1, 203.0.113.9, 10.0.0.2",
        "garbage, 203.0.113.9, 10.0.0.2",
        "198.51.100.1,203.0.113.9,10.0.0.2",
    ] {
        assert_eq!(
            app.send(via_proxies(spoofed)).await.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{spoofed}: still 203.0.113.9"
        );
    }
    // Another client behind the same proxy has its own quota; so has the proxy itself.
    assert_eq!(
        app.send(via_proxies("203.0.113.10, 10.0.0.2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.send(Req::get("/api/x").from("10.0.0.1").build())
            .await
            .status,
        StatusCode::OK,
        "no header: the proxy is the client"
    );
    // Several field lines are one list, in order.
    let split = Req::get("/api/x")
        .from("10.0.0.1")
        .header("x-forwarded-for", "198.51.100.50")
        .header("x-forwarded-for", "203.0.113.9, 10.0.0.2")
        .build();
    assert_eq!(app.send(split).await.status, StatusCode::TOO_MANY_REQUESTS);
    // Only the configured header is read: X-Real-IP from the proxy is passed-on client text.
    let other_header = Req::get("/api/x")
        .from("10.0.0.1")
        .header("x-real-ip", "198.51.100.60")
        .header("x-forwarded-for", "203.0.113.9")
        .build();
    assert_eq!(
        app.send(other_header).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn forwarded_and_x_real_ip_are_read_when_configured() {
    let app = App::new(per_ip(ConfigBuilder::new()), |b| {
        b.client_address(behind(ProxyHeader::Forwarded))
    });
    let forwarded = |value: &str| {
        Req::get("/api/x")
            .from("127.0.0.1")
            .header("forwarded", value)
            .build()
    };
    assert_eq!(
        app.send(forwarded(
            "for=203.0.113.9;proto=https, for=\"[2001:db8:cafe::17]:4711\""
        ))
        .await
        .status,
        StatusCode::OK
    );
    // The right-most untrusted hop was the IPv6 client: its /64 is spent, the IPv4 hop is not.
    assert_eq!(
        app.send(forwarded("for=\"[2001:db8:cafe::99]\""))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        app.send(forwarded("for=203.0.113.9")).await.status,
        StatusCode::OK
    );

    let app = App::new(per_ip(ConfigBuilder::new()), |b| {
        b.client_address(behind(ProxyHeader::XRealIp))
    });
    let real_ip = |value: &str| {
        Req::get("/api/x")
            .from("10.1.2.3")
            .header("x-real-ip", value)
            .build()
    };
    assert_eq!(
        app.send(real_ip("203.0.113.9")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.send(real_ip("203.0.113.9")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        app.send(real_ip("203.0.113.10")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn ipv6_clients_are_counted_by_their_network() {
    let app = App::new(per_ip(ConfigBuilder::new()), |b| b);
    assert_eq!(
        app.send(Req::get("/api/x").from("2001:db8:1:2::1").build())
            .await
            .status,
        StatusCode::OK
    );
    // Another address of the same /64 is the same client.
    assert_eq!(
        app.send(
            Req::get("/api/x")
                .from("2001:db8:1:2:ffff:ffff:ffff:ffff")
                .build()
        )
        .await
        .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The next /64 is another.
    assert_eq!(
        app.send(Req::get("/api/x").from("2001:db8:1:3::1").build())
            .await
            .status,
        StatusCode::OK
    );
    // An IPv4-mapped peer is its IPv4 address.
    assert_eq!(
        app.send(Req::get("/api/x").from("::ffff:203.0.113.7").build())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        app.send(Req::get("/api/x").from("203.0.113.7").build())
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // `ipv6_prefix = 48`: the whole /48 is one client; 128: every address its own.
    let wide = App::new(per_ip(ConfigBuilder::new().ipv6_prefix(48)), |b| b);
    assert_eq!(
        wide.send(Req::get("/api/x").from("2001:db8:1:2::1").build())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        wide.send(Req::get("/api/x").from("2001:db8:1:ffff::1").build())
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let each = App::new(per_ip(ConfigBuilder::new().ipv6_prefix(128)), |b| b);
    for address in ["2001:db8:1:2::1", "2001:db8:1:2::2"] {
        assert_eq!(
            each.send(Req::get("/api/x").from(address).build())
                .await
                .status,
            StatusCode::OK,
            "{address}"
        );
    }
}
