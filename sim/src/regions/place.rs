//! Where each request of a trace is decided: its region, by what the trace says of its place.

use edgelimit_engine::config::global::Global;

use super::assign::Assignment;
use super::continents::{Continents, CONTINENTS};

/// What a trace line says of where a request came from, each empty when it says nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place<'a> {
    /// A region named outright (a CSV/NDJSON `region` column).
    pub region: &'a str,
    /// The Cloudflare colo (`request.cf.colo`: Logpush `EdgeColoCode`, a `colo` column, the
    /// Worker's own log line).
    pub colo: &'a str,
    /// The client's country, ISO 3166-1 alpha-2 (Logpush `ClientCountry`, a `country` column).
    pub country: &'a str,
    /// The client's continent (`request.cf.continent`: a `continent` column, the Worker's own
    /// log line).
    pub continent: &'a str,
}

/// How a request's region was found, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attribution {
    /// The trace named the region.
    Named,
    /// A region lists the request's colo.
    Colo,
    /// By the request's continent (given, or its country's), as the Worker maps it: the region
    /// listing the continent, else the first.
    Continent,
    /// `--assign-regions`, by a hash of the request's client.
    Assigned,
    /// Nothing placed it: the first region, as the Worker does.
    First,
}

impl Attribution {
    /// Every attribution, in order of precedence.
    pub const ALL: [Attribution; 5] = [
        Attribution::Named,
        Attribution::Colo,
        Attribution::Continent,
        Attribution::Assigned,
        Attribution::First,
    ];

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Attribution::Named => "region",
            Attribution::Colo => "colo",
            Attribution::Continent => "continent",
            Attribution::Assigned => "assigned",
            Attribution::First => "first",
        }
    }
}

/// A configuration's regions, ready to place requests: names, colos and continents resolved to
/// region indices once, so placing a request is a few comparisons and one table lookup. Counts
/// what it placed.
#[derive(Debug, Clone)]
pub struct Regions {
    names: Vec<String>,
    /// Each colo a region lists (upper case), with the region `Global::region_of` gives it.
    colos: Vec<(String, u32)>,
    /// Per continent (in [`CONTINENTS`]' order), the region `Global::region_of` gives it.
    by_continent: [u32; CONTINENTS.len()],
    continents: Continents,
    assignment: Option<Assignment>,
    counts: PlaceCounts,
}

/// What [`Regions`] placed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlaceCounts {
    /// Requests per region, in region order.
    pub requests: Vec<u64>,
    /// Requests per [`Attribution`], in [`Attribution::ALL`]'s order.
    pub by: [u64; 5],
    /// Requests whose country or continent the table does not know (`XX`, `T1`, a typo):
    /// placed as if the trace gave none.
    pub unknown_places: u64,
}

impl Regions {
    /// `global`'s regions, placing requests the trace does not place by `assignment` if given,
    /// else in the first region. The configuration's forced `region` is not applied: it pins a
    /// `wrangler dev` test's requests, whose place is fixed, and a replay's have their own.
    pub fn new(global: &Global, assignment: Option<Assignment>) -> Regions {
        // `region_of` itself, unforced, decides where each colo and continent goes.
        let unforced = Global {
            region: None,
            ..global.clone()
        };
        let mut colos: Vec<(String, u32)> = Vec::new();
        for colo in global.regions.iter().flat_map(|r| &r.colos) {
            if !colos.iter().any(|(c, _)| c == colo) {
                colos.push((colo.clone(), unforced.region_of(None, Some(colo)) as u32));
            }
        }
        Regions {
            names: global.regions.iter().map(|r| r.name.clone()).collect(),
            colos,
            by_continent: CONTINENTS.map(|c| unforced.region_of(Some(c), None) as u32),
            continents: Continents::new(),
            assignment,
            counts: PlaceCounts {
                requests: vec![0; global.regions.len()],
                ..PlaceCounts::default()
            },
        }
    }

    /// The regions' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The region of a request at `place` whose client is `client` (what `--assign-regions`
    /// hashes), and how it was found:
    /// 1. the region `place` names;
    /// 2. else the region listing its colo;
    /// 3. else by its continent (given, or its country's), as the Worker maps it;
    /// 4. else by `--assign-regions` (a request without a client hashes as an empty one);
    /// 5. else the first.
    ///
    /// A colo no region lists says nothing alone: the Worker would place the request by its
    /// continent, which the trace lacks. The error is a region name the configuration does not
    /// have, with those it has.
    pub fn place(
        &mut self,
        place: Place<'_>,
        client: Option<&[u8]>,
    ) -> Result<(u32, Attribution), String> {
        let (region, by) = self.find(place, client)?;
        self.counts.requests[region as usize] += 1;
        self.counts.by[by as usize] += 1;
        Ok((region, by))
    }

    fn find(
        &mut self,
        place: Place<'_>,
        client: Option<&[u8]>,
    ) -> Result<(u32, Attribution), String> {
        let named = place.region.trim();
        if !named.is_empty() {
            return match self
                .names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(named))
            {
                Some(at) => Ok((at as u32, Attribution::Named)),
                None => Err(format!(
                    "`{named}` is not a region of the configuration (its regions: {})",
                    self.names.join(", ")
                )),
            };
        }
        let colo = place.colo.trim();
        if !colo.is_empty() {
            if let Some((_, region)) = self
                .colos
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(colo))
            {
                return Ok((*region, Attribution::Colo));
            }
        }
        let continent = place.continent.trim();
        let continent = if !continent.is_empty() {
            CONTINENTS
                .iter()
                .position(|c| c.eq_ignore_ascii_case(continent))
        } else if !place.country.trim().is_empty() {
            self.continents
                .of(place.country.as_bytes())
                .and_then(|c| CONTINENTS.iter().position(|k| *k == c))
        } else {
            None
        };
        match continent {
            Some(at) => return Ok((self.by_continent[at], Attribution::Continent)),
            None if !place.continent.trim().is_empty() || !place.country.trim().is_empty() => {
                self.counts.unknown_places += 1;
            }
            None => {}
        }
        if let Some(assignment) = &self.assignment {
            return Ok((
                assignment.region_of(client.unwrap_or_default()),
                Attribution::Assigned,
            ));
        }
        Ok((0, Attribution::First))
    }

    /// What was placed so far.
    pub fn counts(&self) -> &PlaceCounts {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regions::testing::three_regions;

    fn at<'a>(region: &'a str, colo: &'a str, country: &'a str, continent: &'a str) -> Place<'a> {
        Place {
            region,
            colo,
            country,
            continent,
        }
    }

    #[test]
    fn a_named_region_then_the_colo_then_the_continent_then_the_assignment_then_the_first() {
        let global = three_regions();
        let mut regions = Regions::new(&global, None);
        let mut place = |p: Place<'_>| regions.place(p, Some(b"203.0.113.7")).unwrap();
        use Attribution::*;
        assert_eq!(place(at("US", "SYD", "DE", "EU")), (1, Named));
        assert_eq!(place(at("", "syd", "DE", "")), (2, Colo));
        assert_eq!(
            place(at("", "FRA", "DE", "")),
            (0, Continent),
            "an unlisted colo"
        );
        assert_eq!(place(at("", "", "br", "")), (1, Continent));
        assert_eq!(
            place(at("", "", "DE", "oc")),
            (2, Continent),
            "the continent given wins"
        );
        assert_eq!(
            place(at("", "", "AQ", "")),
            (0, Continent),
            "no region lists AN"
        );
        assert_eq!(
            place(at("", "DFW", "", "")),
            (0, First),
            "a colo alone says nothing"
        );
        assert_eq!(place(at("", "", "T1", "")), (0, First));
        assert_eq!(place(at("", "", "", "")), (0, First));
        assert_eq!(regions.counts().unknown_places, 1);
        assert_eq!(regions.counts().by, [1, 1, 4, 0, 3]);
        assert_eq!(regions.counts().requests, [5, 2, 2]);
        let e = regions.place(at("mars", "", "", ""), None).unwrap_err();
        assert_eq!(
            e,
            "`mars` is not a region of the configuration (its regions: eu, us, ap)"
        );

        let assign = "us=1".parse::<crate::regions::AssignSpec>().unwrap();
        let mut assigned = Regions::new(&global, Some(assign.resolve(&global).unwrap()));
        assert_eq!(
            assigned.place(at("", "DFW", "", ""), None).unwrap(),
            (1, Assigned)
        );
        assert_eq!(
            assigned.place(at("", "", "US", ""), None).unwrap(),
            (1, Continent)
        );
        assert_eq!(
            assigned.place(at("", "", "JP", ""), None).unwrap(),
            (2, Continent),
            "a placed request is not assigned"
        );
    }

    #[test]
    fn colos_and_continents_go_where_region_of_sends_them_ignoring_a_forced_region() {
        let mut global = three_regions();
        global.regions[0].colos = vec!["SYD".into(), "LHR".into()];
        global.region = Some("us".into());
        let mut regions = Regions::new(&global, None);
        let unforced = Global {
            region: None,
            ..global.clone()
        };
        for continent in CONTINENTS {
            let (region, _) = regions.place(at("", "", "", continent), None).unwrap();
            assert_eq!(region as usize, unforced.region_of(Some(continent), None));
        }
        for colo in ["SYD", "LHR"] {
            let (region, _) = regions.place(at("", colo, "", "NA"), None).unwrap();
            assert_eq!(region as usize, unforced.region_of(Some("NA"), Some(colo)));
        }
        assert_eq!(regions.place(at("", "SYD", "", ""), None).unwrap().0, 0);
    }
}
