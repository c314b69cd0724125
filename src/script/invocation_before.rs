//! The planner as it was when each key and argument was a `String` of its own (before
//! `src/script/call.rs`), kept for tests only: what the new one must plan, part for part.

use super::invocation::algorithm_code;
use crate::algorithm::Charge;
use crate::policy::Algorithm;
use crate::script::{encode_cost, Script, Topology};
use crate::store::key::{control_key, hash_slot, list_key, request_key, state_key};
use crate::store::{Check, CheckItem};

/// One call, as it was: its script, keys and arguments.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Invocation {
    pub(super) script: &'static Script,
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<String>,
}

/// The old `CheckPlan::plan`'s calls and atomicity, for a time already checked (`now`: its
/// decimal text, or empty for Redis TIME); `None` where it refused the check.
pub(super) fn plan(
    check: &Check,
    namespace: &str,
    now: String,
    topology: Topology,
    control: bool,
) -> Option<(Vec<Invocation>, bool)> {
    let items = check.items();
    // Every key of an item shares its hash tag, so the state keys decide the slots.
    let keys: Vec<Vec<String>> = items
        .iter()
        .map(|item| keys(item, namespace, control))
        .collect();
    if check.is_gated() {
        if topology == Topology::Cluster {
            return None;
        }
        return Some((
            vec![gated_invocation(check, namespace, now, keys, control)],
            true,
        ));
    }
    let atomic = items.len() <= 1
        || topology == Topology::SingleNode
        || keys
            .windows(2)
            .all(|w| hash_slot(&w[0][0]) == hash_slot(&w[1][0]));
    let invocations = if items.len() == 1 || !atomic {
        items
            .iter()
            .zip(keys)
            .map(|(item, keys)| {
                let mut args = Vec::with_capacity(5);
                args.push(now.clone());
                push_item(&mut args, item, false, control);
                Invocation {
                    script: Script::single(item.limit.policy.algorithm()),
                    keys,
                    args,
                }
            })
            .collect()
    } else if items.is_empty() {
        Vec::new()
    } else {
        let mut args = Vec::with_capacity(1 + 6 * items.len());
        args.push(now);
        for item in items {
            args.push(algorithm_code(item.limit.policy.algorithm()).to_string());
            push_item(&mut args, item, true, control);
        }
        vec![Invocation {
            script: Script::multi(),
            keys: keys.into_iter().flatten().collect(),
            args,
        }]
    };
    Some((invocations, atomic))
}

fn gated_invocation(
    check: &Check,
    namespace: &str,
    now: String,
    keys: Vec<Vec<String>>,
    control: bool,
) -> Invocation {
    let mut lists: Vec<&str> = Vec::new();
    let mut gate_args: Vec<String> = vec![check.gates().len().to_string()];
    for gate in check.gates() {
        for names in [&gate.deny, &gate.allow] {
            gate_args.push(names.len().to_string());
            for name in names {
                let index = match lists.iter().position(|l| *l == name.as_str()) {
                    Some(i) => i,
                    None => {
                        lists.push(name);
                        lists.len() - 1
                    }
                };
                gate_args.push((index + 1).to_string());
            }
        }
    }
    let candidates = check.probe().candidates();
    let mut args = Vec::with_capacity(4 + candidates.len() + gate_args.len() + 8 * keys.len());
    args.push(now);
    args.push("gates".to_string());
    args.push(lists.len().to_string());
    args.push(candidates.len().to_string());
    args.extend(candidates.iter().cloned());
    args.extend(gate_args);
    for item in check.items() {
        args.push(algorithm_code(item.limit.policy.algorithm()).to_string());
        let count_at = args.len() + 4;
        push_item(&mut args, item, true, control);
        if let Some(gate) = item.gate.filter(|&g| g < check.gates().len()) {
            let count: usize = args[count_at].parse().expect("push_item writes a count");
            args[count_at] = (count + 1).to_string();
            args.push("gate".to_string());
            args.push((gate + 1).to_string());
        }
    }
    let mut all_keys: Vec<String> = lists.iter().map(|l| list_key(namespace, l)).collect();
    all_keys.extend(keys.into_iter().flatten());
    Invocation {
        script: Script::multi(),
        keys: all_keys,
        args,
    }
}

fn keys(item: &CheckItem, namespace: &str, control: bool) -> Vec<String> {
    let mut keys = vec![state_key(
        namespace,
        &item.limit.name,
        item.limit.policy.algorithm(),
        &item.identifier,
    )];
    if let Some(request_id) = &item.request_id {
        keys.push(request_key(
            namespace,
            &item.limit.name,
            &item.identifier,
            request_id,
        ));
    }
    if control {
        keys.push(control_key(namespace, &item.limit.name, &item.identifier));
    }
    keys
}

fn charge_args(item: &CheckItem) -> (i64, Option<(&'static str, String)>) {
    let concurrency = item.limit.policy.algorithm() == Algorithm::Concurrency;
    match item.charge {
        Charge::Request => (item.cost, None),
        Charge::Settle if item.cost > 0 => (item.cost, Some(("settle", "1".to_string()))),
        Charge::Settle => (item.cost, None),
        Charge::Release { .. } if item.cost <= 0 => (0, None),
        Charge::Release { lease_ms } if concurrency => {
            (item.cost, Some(("lease", lease_ms.to_string())))
        }
        Charge::Release { .. } => (-item.cost, None),
    }
}

fn push_item(args: &mut Vec<String>, item: &CheckItem, multi: bool, control: bool) {
    let policy = &item.limit.policy;
    let (cost, option) = charge_args(item);
    args.push(policy.limit().to_string());
    args.push(policy.window_ms().to_string());
    args.push(policy.capacity().to_string());
    args.push(encode_cost(cost).to_string());
    let remember = item.request_id.as_ref().map(|_| item.remember_ms());
    let count = option.is_some() as usize + remember.is_some() as usize + control as usize;
    if count == 0 && !multi {
        return;
    }
    args.push(count.to_string());
    if let Some((name, value)) = option {
        args.push(name.to_string());
        args.push(value);
    }
    if let Some(ms) = remember {
        args.push("rq".to_string());
        args.push(ms.to_string());
    }
    if control {
        args.push("ctl".to_string());
        args.push(item.limit.tiers.script_table().to_string());
    }
}
