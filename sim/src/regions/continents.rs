//! Countries to continents: a trace's country (Logpush `ClientCountry`, a CSV/NDJSON `country`
//! column) as the continent code Cloudflare gives a Worker in `request.cf.continent`, which is
//! what a configuration's regions name.
//!
//! The table is GeoNames' `countryInfo.txt` (its `Continent` column, CC BY 4.0): the continent
//! codes `AF`, `AN`, `AS`, `EU`, `NA`, `OC` and `SA` are GeoNames', and so are the borderline
//! calls (Russia `EU`, Turkey `AS`, Cyprus `EU`, Egypt `AF`, Panama `NA`), which the GeoIP
//! databases follow. Every ISO 3166-1 alpha-2 code in use is listed, with `XK` (Kosovo) and the
//! retired `AN` and `CS`; Cloudflare's own `XX` (unknown) and `T1` (Tor) have no continent.

/// The continent codes, in `request.cf.continent`'s spelling.
pub const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// Each line: a continent, then countries on it.
const TABLE: &str = "\
AF:AO BF BI BJ BW CD CF CG CI CM CV DJ DZ EG EH ER ET GA GH GM GN GQ GW KE KM LR LS LY
AF:MA MG ML MR MU MW MZ NA NE NG RE RW SC SD SH SL SN SO SS ST SZ TD TG TN TZ UG YT ZA
AF:ZM ZW
AN:AQ BV GS HM TF
AS:AE AF AM AZ BD BH BN BT CC CN GE HK ID IL IN IO IQ IR JO JP KG KH KP KR KW KZ LA LB
AS:LK MM MN MO MV MY NP OM PH PK PS QA SA SG SY TH TJ TM TR TW UZ VN YE
EU:AD AL AT AX BA BE BG BY CH CS CY CZ DE DK EE ES FI FO FR GB GG GI GR HR HU IE IM IS
EU:IT JE LI LT LU LV MC MD ME MK MT NL NO PL PT RO RS RU SE SI SJ SK SM UA VA XK
NA:AG AI AN AW BB BL BM BQ BS BZ CA CR CU CW DM DO GD GL GP GT HN HT JM KN KY LC MF MQ
NA:MS MX NI PA PM PR SV SX TC TT US VC VG VI
OC:AS AU CK CX FJ FM GU KI MH MP NC NF NR NU NZ PF PG PN PW SB TK TL TO TV UM VU WF WS
SA:AR BO BR CL CO EC FK GF GY PE PY SR UY VE
";

/// Marks a two-letter code with no continent in [`Continents`].
const NONE: u8 = u8::MAX;

/// Every two-letter code's continent, by letters: one array lookup a request.
#[derive(Clone)]
pub struct Continents {
    /// Index `26·first + second` (letters from `A`), the continent's index in [`CONTINENTS`].
    by_code: [u8; 26 * 26],
}

impl std::fmt::Debug for Continents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.by_code.iter().filter(|&&c| c != NONE).count();
        f.debug_struct("Continents")
            .field("countries", &known)
            .finish()
    }
}

impl Default for Continents {
    fn default() -> Self {
        Continents::new()
    }
}

/// The index of a two-letter code in [`Continents::by_code`], any case; `None` for anything else.
fn slot(code: &[u8]) -> Option<usize> {
    match code {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => Some(
            usize::from(a.to_ascii_uppercase() - b'A') * 26
                + usize::from(b.to_ascii_uppercase() - b'A'),
        ),
        _ => None,
    }
}

impl Continents {
    /// The table.
    pub fn new() -> Continents {
        let mut by_code = [NONE; 26 * 26];
        for line in TABLE.lines() {
            let (continent, countries) = line.split_once(':').expect("`XX:` opens every line");
            let continent = CONTINENTS
                .iter()
                .position(|c| *c == continent)
                .expect("a continent code") as u8;
            for country in countries.split_ascii_whitespace() {
                by_code[slot(country.as_bytes()).expect("two letters")] = continent;
            }
        }
        Continents { by_code }
    }

    /// The continent of `country` (ISO 3166-1 alpha-2, any case, blanks around ignored);
    /// `None` for a code of no continent (`XX`, `T1`, anything unassigned) or not a code.
    pub fn of(&self, country: &[u8]) -> Option<&'static str> {
        let continent = self.by_code[slot(country.trim_ascii())?];
        CONTINENTS.get(usize::from(continent)).copied()
    }

    /// How many countries the table places.
    pub fn len(&self) -> usize {
        self.by_code.iter().filter(|&&c| c != NONE).count()
    }

    /// Whether the table places none (never: it is built from a fixed list).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_country_is_listed_once_on_one_continent() {
        let mut seen = std::collections::HashSet::new();
        for line in TABLE.lines() {
            let (_, countries) = line.split_once(':').unwrap();
            for country in countries.split_ascii_whitespace() {
                assert!(seen.insert(country), "{country} is listed twice");
            }
        }
        // GeoNames' 250 countries and territories, and the retired AN and CS.
        assert_eq!(seen.len(), 252);
        assert_eq!(Continents::new().len(), 252);
    }

    #[test]
    fn countries_read_as_cloudflare_spells_continents() {
        let table = Continents::new();
        for (country, continent) in [
            ("DE", "EU"),
            ("us", "NA"),
            (" br ", "SA"),
            ("JP", "AS"),
            ("AU", "OC"),
            ("NG", "AF"),
            ("AQ", "AN"),
            // The calls a reader might doubt, as GeoNames makes them.
            ("RU", "EU"),
            ("TR", "AS"),
            ("CY", "EU"),
            ("EG", "AF"),
            ("PA", "NA"),
            ("NA", "AF"),
            ("XK", "EU"),
        ] {
            assert_eq!(table.of(country.as_bytes()), Some(continent), "{country}");
        }
        for none in ["XX", "T1", "ZZ", "", "D", "DEU", "é"] {
            assert_eq!(table.of(none.as_bytes()), None, "{none}");
        }
    }
}
