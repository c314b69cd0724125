//! `--baseline current.toml`: both configurations replay the same requests side by side, and
//! every request whose answer flips — forwarded under one, refused under the other — is counted
//! under each rule that matched it in either, with the identifier the refusing answer was about
//! (or, for a 403, the deny list entry that refused it).

use std::collections::HashMap;
use std::sync::Arc;

use edgelimit::Identifier;

use super::names::display_identifier;
use super::overrides::AppliedOverrides;

/// What one configuration answered one request: the status, the rules that matched (by index),
/// and the limit and identifier the answer was about.
#[derive(Debug, Clone, Default)]
pub struct Answered {
    /// The status (200: forwarded).
    pub status: u16,
    /// The matched rules' indices in their configuration.
    pub rules: Vec<usize>,
    /// The binding limit's name and identifier, when the request was refused and the enforced
    /// limits were decided.
    pub binding: Option<(Arc<str>, Identifier)>,
    /// For a 403: the deny list and entry that refused it (`deny: ip 198.51.100.0/24`).
    pub listed: Option<String>,
}

/// An identifier whose answers changed under a rule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Affected {
    /// `limit: identifier`, the limit the refusing answer named.
    pub identifier: String,
    /// Its requests forwarded under the baseline and refused under the candidate.
    pub newly_denied: u64,
    /// Its requests refused under the baseline and forwarded under the candidate.
    pub newly_admitted: u64,
}

/// One rule's changes (rules are matched across the two configurations by name).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleChange {
    /// The rule's name.
    pub name: String,
    /// Whether the baseline has it.
    pub in_baseline: bool,
    /// Whether the candidate has it.
    pub in_candidate: bool,
    /// Requests it matched in either configuration.
    pub matched: u64,
    /// 200 → refused (429, 503 or 400).
    pub newly_denied: u64,
    /// Refused → 200.
    pub newly_admitted: u64,
    /// The ten identifiers with the most changed answers.
    pub top_identifiers: Vec<Affected>,
}

/// The comparison of a candidate configuration with a baseline on one trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WhatIf {
    /// The baseline configuration file.
    pub baseline: String,
    /// `--baseline-overrides`: what the file applied to the baseline's replay, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_overrides: Option<AppliedOverrides>,
    /// Requests compared.
    pub requests: u64,
    /// Forwarded under the baseline, refused under the candidate.
    pub newly_denied: u64,
    /// Refused under the baseline, forwarded under the candidate.
    pub newly_admitted: u64,
    /// Per rule, baseline rules first then rules only the candidate has.
    pub rules: Vec<RuleChange>,
}

#[derive(Debug)]
struct RuleTally {
    name: String,
    in_baseline: bool,
    in_candidate: bool,
    matched: u64,
    flips: [u64; 2],
    identifiers: HashMap<String, [u64; 2]>,
}

/// The running comparison.
#[derive(Debug)]
pub struct WhatIfTally {
    baseline: String,
    rules: Vec<RuleTally>,
    /// Baseline rule index → tally index; candidate rule index → tally index.
    from_baseline: Vec<usize>,
    from_candidate: Vec<usize>,
    requests: u64,
    flips: [u64; 2],
    scratch: Vec<usize>,
}

impl WhatIfTally {
    /// A comparison of configurations whose rules are named `baseline_rules` and
    /// `candidate_rules`.
    pub fn new(baseline: String, baseline_rules: &[String], candidate_rules: &[String]) -> Self {
        let mut rules: Vec<RuleTally> = Vec::new();
        let mut index = |name: &String, baseline: bool| -> usize {
            let i = match rules.iter().position(|r| r.name == *name) {
                Some(i) => i,
                None => {
                    rules.push(RuleTally {
                        name: name.clone(),
                        in_baseline: false,
                        in_candidate: false,
                        matched: 0,
                        flips: [0, 0],
                        identifiers: HashMap::new(),
                    });
                    rules.len() - 1
                }
            };
            if baseline {
                rules[i].in_baseline = true;
            } else {
                rules[i].in_candidate = true;
            }
            i
        };
        let from_baseline = baseline_rules.iter().map(|n| index(n, true)).collect();
        let from_candidate = candidate_rules.iter().map(|n| index(n, false)).collect();
        WhatIfTally {
            baseline,
            rules,
            from_baseline,
            from_candidate,
            requests: 0,
            flips: [0, 0],
            scratch: Vec::new(),
        }
    }

    /// Compares one request's answers.
    pub fn add(&mut self, baseline: &Answered, candidate: &Answered) {
        self.requests += 1;
        self.scratch.clear();
        self.scratch
            .extend(baseline.rules.iter().map(|&r| self.from_baseline[r]));
        self.scratch
            .extend(candidate.rules.iter().map(|&r| self.from_candidate[r]));
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let before = baseline.status == 200;
        let after = candidate.status == 200;
        let flip = match (before, after) {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => None,
        };
        if let Some(f) = flip {
            self.flips[f] += 1;
        }
        // The refusing answer says which limit and identifier the change is about.
        let label = flip.map(|f| {
            let refusing = if f == 0 { candidate } else { baseline };
            match (&refusing.listed, &refusing.binding) {
                (Some(listed), _) => listed.clone(),
                (None, Some((limit, id))) => format!("{limit}: {}", display_identifier(id)),
                (None, None) => "(missing identifier)".to_string(),
            }
        });
        for &r in &self.scratch {
            let rule = &mut self.rules[r];
            rule.matched += 1;
            if let (Some(f), Some(label)) = (flip, &label) {
                rule.flips[f] += 1;
                match rule.identifiers.get_mut(label) {
                    Some(counts) => counts[f] += 1,
                    None => {
                        let mut counts = [0, 0];
                        counts[f] = 1;
                        rule.identifiers.insert(label.clone(), counts);
                    }
                }
            }
        }
    }

    /// The comparison.
    pub fn finish(&self) -> WhatIf {
        WhatIf {
            baseline: self.baseline.clone(),
            baseline_overrides: None,
            requests: self.requests,
            newly_denied: self.flips[0],
            newly_admitted: self.flips[1],
            rules: self
                .rules
                .iter()
                .map(|r| {
                    let mut top: Vec<Affected> = r
                        .identifiers
                        .iter()
                        .map(|(identifier, c)| Affected {
                            identifier: identifier.clone(),
                            newly_denied: c[0],
                            newly_admitted: c[1],
                        })
                        .collect();
                    top.sort_by(|a, b| {
                        (b.newly_denied + b.newly_admitted)
                            .cmp(&(a.newly_denied + a.newly_admitted))
                            .then_with(|| a.identifier.cmp(&b.identifier))
                    });
                    top.truncate(10);
                    RuleChange {
                        name: r.name.clone(),
                        in_baseline: r.in_baseline,
                        in_candidate: r.in_candidate,
                        matched: r.matched,
                        newly_denied: r.flips[0],
                        newly_admitted: r.flips[1],
                        top_identifiers: top,
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, rules: &[usize], who: Option<(&str, &str)>) -> Answered {
        Answered {
            status,
            rules: rules.to_vec(),
            binding: who.map(|(l, i)| (Arc::from(l), Identifier::from(i))),
            listed: None,
        }
    }

    #[test]
    fn flips_are_counted_per_rule_with_the_refusing_identifier() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut t = WhatIfTally::new(
            "base.toml".into(),
            &names(&["api", "old"]),
            &names(&["new", "api"]),
        );
        // 200 → 429 under the candidate's `new` rule, which the baseline lacks.
        t.add(
            &answered(200, &[0], Some(("per-ip", "a"))),
            &answered(429, &[0, 1], Some(("new-ip", "a"))),
        );
        // 429 → 200.
        t.add(
            &answered(429, &[0, 1], Some(("per-ip", "b"))),
            &answered(200, &[1], None),
        );
        // Unchanged.
        t.add(&answered(200, &[0], None), &answered(200, &[1], None));
        let w = t.finish();
        assert_eq!((w.requests, w.newly_denied, w.newly_admitted), (3, 1, 1));
        let api = &w.rules[0];
        assert_eq!(
            (
                api.name.as_str(),
                api.matched,
                api.newly_denied,
                api.newly_admitted
            ),
            ("api", 3, 1, 1)
        );
        assert_eq!(api.top_identifiers.len(), 2);
        let new = w.rules.iter().find(|r| r.name == "new").unwrap();
        assert!(!new.in_baseline && new.in_candidate);
        assert_eq!(new.top_identifiers[0].identifier, "new-ip: a");
        let old = w.rules.iter().find(|r| r.name == "old").unwrap();
        assert_eq!((old.matched, old.newly_admitted), (1, 1));
        assert_eq!(old.top_identifiers[0].identifier, "per-ip: b");
    }
}
