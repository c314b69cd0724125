# Installs Prometheus and promtool (Debian's `prometheus` package) for the test that scrapes the
# tower layer and the gateway with a real Prometheus and checks the alert rules and the
# dashboard's queries (tower/tests/prometheus.rs, ops/). Only when missing. Sourced by
# scripts/test. The package's own service, if the machine runs one, is left alone: the test
# starts a Prometheus of its own on a free loopback port.
ensure_apt promtool prometheus
