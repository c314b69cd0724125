//! A host's Prometheus page as OpenTelemetry instruments ([`export_page`]): one observable
//! instrument per counter and gauge family, named as the family less its `_total` (an
//! OpenTelemetry collector's Prometheus exporter adds it back), with the family's help as
//! description, its labels as attributes, and the values the page shows at each collection —
//! read from the page itself, so the two cannot disagree. A histogram is recorded by its host as
//! it observes ([`histogram`]): OpenTelemetry has no instrument for one observed whole.

use std::sync::Arc;

use opentelemetry::metrics::{AsyncInstrument, Histogram, Meter};
use opentelemetry::KeyValue;

use crate::page::{self, Kind};

/// What renders the page: called at each collection.
type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Registers on `meter` one instrument for each counter and gauge family of the page `render`
/// writes (as it reads now: a host writes every family's `# TYPE` from its start), each reading
/// the page again at every collection. Returns the instruments' names; histograms and
/// summaries are left to the host ([`histogram`]). A page that cannot be read registers nothing.
pub fn export_page(
    meter: &Meter,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> Vec<String> {
    let render: Render = Arc::new(render);
    let Ok(families) = page::parse(&render()) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for family in families {
        let name = instrument_name(&family.name, family.kind);
        let unit = unit(&name);
        let observe = observer(render.clone(), family.name.clone());
        match family.kind {
            Kind::Counter => {
                let mut builder = meter
                    .f64_observable_counter(name.clone())
                    .with_description(family.help)
                    .with_callback(move |instrument| observe(instrument));
                if let Some(unit) = unit {
                    builder = builder.with_unit(unit);
                }
                builder.build();
            }
            Kind::Gauge | Kind::Untyped => {
                let mut builder = meter
                    .f64_observable_gauge(name.clone())
                    .with_description(family.help)
                    .with_callback(move |instrument| observe(instrument));
                if let Some(unit) = unit {
                    builder = builder.with_unit(unit);
                }
                builder.build();
            }
            Kind::Histogram | Kind::Summary => continue,
        }
        names.push(name);
    }
    names
}

/// A histogram named as the page's family `name` (in seconds, `…_seconds`), with these bucket
/// bounds: the host records each observation into it as it counts it for the page.
pub fn histogram(meter: &Meter, name: &str, description: &str, bounds: &[f64]) -> Histogram<f64> {
    let builder = meter
        .f64_histogram(name.to_string())
        .with_description(description.to_string())
        .with_boundaries(bounds.to_vec());
    match unit(name) {
        Some(unit) => builder.with_unit(unit).build(),
        None => builder.build(),
    }
}

/// The callback of the family `family`: the page rendered and read again, each of the family's
/// samples observed with its labels.
fn observer(render: Render, family: String) -> impl Fn(&dyn AsyncInstrument<f64>) + Send + Sync {
    move |instrument| {
        let Ok(families) = page::parse(&render()) else {
            return;
        };
        let Some(family) = families.into_iter().find(|f| f.name == family) else {
            return;
        };
        for sample in family.samples {
            let attributes: Vec<KeyValue> = sample
                .labels
                .into_iter()
                .map(|(key, value)| KeyValue::new(key, value))
                .collect();
            instrument.observe(sample.value, &attributes);
        }
    }
}

/// The instrument's name: the family's, less a counter's `_total`.
fn instrument_name(family: &str, kind: Kind) -> String {
    match kind {
        Kind::Counter => family.strip_suffix("_total").unwrap_or(family).to_string(),
        _ => family.to_string(),
    }
}

/// The unit a name states (UCUM, as OpenTelemetry writes units).
fn unit(name: &str) -> Option<&'static str> {
    name.ends_with("_seconds").then_some("s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_lose_their_total_and_seconds_are_a_unit() {
        assert_eq!(
            instrument_name("edgelimit_decisions_total", Kind::Counter),
            "edgelimit_decisions"
        );
        assert_eq!(
            instrument_name("edgelimit_delay_seconds_total", Kind::Counter),
            "edgelimit_delay_seconds"
        );
        assert_eq!(unit("edgelimit_delay_seconds"), Some("s"));
        assert_eq!(
            instrument_name("edgelimit_gateway_connections_open", Kind::Gauge),
            "edgelimit_gateway_connections_open"
        );
        assert_eq!(unit("edgelimit_gateway_connections_open"), None);
    }
}
