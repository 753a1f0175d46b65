//! The parts of nested calls that need no guest: which kinds ran, a tree's
//! budget bookkeeping, replay keys and records, and the refusals a caller
//! gives before the path. The integration tests run real trees.

use serde_json::{Map, json};

use super::*;
use crate::catalog::component::Hints;
use crate::catalog::table::upstream_entry;
use crate::catalog::upstream::{Answering, Closing, Upstream, UpstreamAnswer};
use crate::sandbox::outcome::EventSink;
use crate::sandbox::secrets::Secrets;

/// An upstream link no test reaches: every call here is refused before it.
struct Unreached;

impl Upstream for Unreached {
    fn call(
        &self,
        _: &str,
        _: Map<String, Value>,
        _: Duration,
        _: Option<EventSink>,
        _: Option<Elicitor>,
    ) -> Answering<'_> {
        Box::pin(async {
            UpstreamAnswer::Failed {
                kind: ErrorKind::Unavailable,
                output: "the link was reached".into(),
            }
        })
    }

    fn close(&self, _: Duration) -> Closing<'_> {
        Box::pin(async {})
    }
}

/// The entry of an upstream tool `name` (which grants no calls).
fn entry(name: &str, read_only: bool) -> Arc<Entry> {
    let hints = Hints {
        read_only,
        ..Hints::default()
    };
    let link = Arc::new(Unreached);
    let limits = Limits::default();
    Arc::new(upstream_entry(
        name,
        hints,
        None,
        link,
        limits,
        Secrets::new(),
    ))
}

fn limits(calls: u32, depth: u32, bytes: u64) -> Limits {
    Limits {
        nested_calls: calls,
        nested_depth: depth,
        nested_bytes: bytes,
        ..Limits::default()
    }
}

fn tree(limits: &Limits) -> Arc<Tree> {
    Tree::new("root", limits, &CallOptions::new())
}

fn nested_call(n: usize) -> NestedCall {
    NestedCall {
        tool: "t".into(),
        call_id: format!("root.{n}"),
        parent_call_id: "root".into(),
        depth: 1,
        is_error: false,
        error_kind: None,
        duration: Duration::ZERO,
        fuel_used: 0,
    }
}

fn response(is_error: bool, error_kind: Option<ErrorKind>) -> NestedResponse {
    NestedResponse {
        call_id: "root.1".into(),
        is_error,
        error_kind,
        output: "out".into(),
        details: Some(r#"{"a":1}"#.into()),
    }
}

fn request(name: &str, arguments: &str) -> NestedRequest {
    NestedRequest {
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// A replay kept in memory.
#[derive(Default)]
struct Memory(Mutex<HashMap<String, Recorded>>);

impl Memory {
    fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }
}

impl Replay for Memory {
    fn recorded(&self, key: &str) -> Option<Recorded> {
        self.0.lock().unwrap().get(key).cloned()
    }

    fn record(&self, key: String, recorded: Recorded) {
        self.0.lock().unwrap().insert(key, recorded);
    }
}

fn replaying(memory: &Arc<Memory>) -> CallOptions {
    let mut options = CallOptions::new();
    options.replay = Some(memory.clone() as Arc<dyn Replay>);
    options
}

/// The binding `replay_key` hashes a call of `tool` with `arguments` to.
fn binding(tool: &str, arguments: &str) -> String {
    blake3::hash(format!("{tool}\n{arguments}").as_bytes())
        .to_hex()
        .to_string()
}

/// A caller at `depth` in `tree`, whose tool (upstream) may call nothing,
/// looking tools up in `table`.
fn caller(tree: Arc<Tree>, depth: u32, table: ToolTable) -> Arc<Caller> {
    Arc::new(Caller {
        table: Arc::new(table),
        tree,
        depth,
        call_id: "root".into(),
        entry: entry("caller", false),
        tracer: None,
    })
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[test]
fn only_kinds_of_calls_that_started_their_tool_count_as_run() {
    use ErrorKind::*;
    let kinds = [
        (NotFound, false),
        (InvalidArguments, false),
        (ToolError, true),
        (OutOfFuel, true),
        (Timeout, true),
        (MemoryLimit, true),
        (OutputLimit, true),
        (Trap, true),
        (Cancelled, false),
        (PermissionDenied, false),
        (Unsupported, false),
        (NestedLimit, false),
        (Unavailable, false),
    ];
    for (kind, expected) in kinds {
        assert_eq!(ran(kind), expected, "{kind:?}");
    }
    // Every kind is in the table above: a new kind must be placed there.
    for (kind, _) in kinds {
        match kind {
            NotFound | InvalidArguments | ToolError | OutOfFuel | Timeout | MemoryLimit
            | OutputLimit | Trap | Cancelled | PermissionDenied | Unsupported | NestedLimit
            | Unavailable => {}
        }
    }
}

#[test]
fn calls_are_counted_from_one() {
    let tree = tree(&limits(5, 4, 100));
    assert_eq!([tree.count(), tree.count(), tree.count()], [1, 2, 3]);
}

#[test]
fn the_calls_within_the_budget_and_the_first_past_it_are_reported() {
    let tree = tree(&limits(3, 4, 100));
    let reported: Vec<bool> = (1..=6).map(|n| tree.reported(n)).collect();
    assert_eq!(reported, [true, true, true, true, false, false]);
    // With no calls allowed, the first (refused) is still reported.
    let none = self::tree(&limits(0, 4, 100));
    assert!(none.reported(1));
    assert!(!none.reported(2));
    // No overflow at the largest budget.
    let most = self::tree(&limits(u32::MAX, 4, 100));
    assert!(most.reported(u64::from(u32::MAX) + 1));
    assert!(!most.reported(u64::from(u32::MAX) + 2));
}

#[test]
fn bytes_past_the_budget_are_refused_and_not_counted() {
    let tree = tree(&limits(5, 4, 10));
    assert!(tree.spend_bytes(4));
    assert!(!tree.spend_bytes(7), "4 + 7 is past 10");
    assert_eq!(
        tree.take_listed().1.bytes,
        4,
        "the refused 7 are not counted"
    );
    assert!(tree.spend_bytes(6), "exactly the budget is within it");
    assert!(!tree.spend_bytes(1));
    assert!(tree.spend_bytes(0));
    assert_eq!(tree.take_listed().1.bytes, 10);
}

#[test]
fn bytes_that_would_overflow_the_count_are_refused() {
    let tree = tree(&limits(5, 4, u64::MAX));
    assert!(tree.spend_bytes(1));
    assert!(!tree.spend_bytes(u64::MAX));
    assert_eq!(tree.take_listed().1.bytes, 1);
}

#[test]
fn usage_reports_calls_up_to_the_budget_the_deepest_call_and_the_bytes() {
    let tree = tree(&limits(2, 4, 100));
    assert_eq!(tree.take_listed().1, NestedUsage::default());
    for _ in 0..5 {
        tree.count();
    }
    tree.deepest.fetch_max(3, Ordering::SeqCst);
    tree.deepest.fetch_max(1, Ordering::SeqCst);
    assert!(tree.spend_bytes(42));
    let (listed, usage) = tree.take_listed();
    assert!(listed.is_empty());
    assert_eq!(
        usage,
        NestedUsage {
            calls: 2,
            depth: 3,
            bytes: 42,
            unlisted: 0,
        }
    );
}

#[test]
fn the_listed_calls_are_capped_and_taken_once() {
    let tree = tree(&limits(5, 4, 100));
    for n in 1..=MAX_LISTED_NESTED + 5 {
        tree.list(nested_call(n));
    }
    let (listed, usage) = tree.take_listed();
    assert_eq!(listed.len(), MAX_LISTED_NESTED);
    assert_eq!(usage.unlisted, 5, "the record says it is not whole");
    assert_eq!(listed[0], nested_call(1));
    assert_eq!(
        listed[MAX_LISTED_NESTED - 1],
        nested_call(MAX_LISTED_NESTED)
    );
    assert!(tree.take_listed().0.is_empty(), "taken, not copied");
    tree.list(nested_call(7));
    assert_eq!(tree.take_listed().0, [nested_call(7)]);
}

#[test]
fn a_tree_without_a_replay_has_no_replay_keys_and_records_nothing() {
    let tree = tree(&limits(5, 4, 100));
    assert_eq!(tree.replay_key("write", "{}"), None);
    assert_eq!(tree.replayed("anything.1"), None);
    // Nothing to record into: no panic, nothing kept.
    tree.record("anything.1".into(), &response(false, None));
}

#[test]
fn replay_keys_count_the_occurrences_of_each_call() {
    let memory = Arc::new(Memory::default());
    let tree = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    let write = binding("write", r#"{"a":1}"#);
    assert_eq!(
        tree.replay_key("write", r#"{"a":1}"#),
        Some(format!("{write}.1"))
    );
    assert_eq!(
        tree.replay_key("write", r#"{"a":1}"#),
        Some(format!("{write}.2"))
    );
    // Other arguments, or another tool, are another call.
    let other = binding("write", r#"{"a":2}"#);
    assert_eq!(
        tree.replay_key("write", r#"{"a":2}"#),
        Some(format!("{other}.1"))
    );
    let edit = binding("edit", r#"{"a":1}"#);
    assert_ne!(edit, write);
    assert_eq!(
        tree.replay_key("edit", r#"{"a":1}"#),
        Some(format!("{edit}.1"))
    );
    assert_eq!(
        tree.replay_key("write", r#"{"a":1}"#),
        Some(format!("{write}.3"))
    );
    // The tool and the arguments are kept apart in the binding.
    assert_ne!(binding("ab", "c"), binding("a", "bc"));
}

#[test]
fn a_call_that_ran_is_recorded_and_replayed() {
    let memory = Arc::new(Memory::default());
    let tree = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    let ok = response(false, None);
    tree.record("ok.1".into(), &ok);
    assert_eq!(tree.replayed("ok.1"), Some(ok.clone()));
    assert_eq!(
        memory.recorded("ok.1"),
        Some(Recorded {
            call_id: ok.call_id.clone(),
            is_error: false,
            error_kind: None,
            output: ok.output.clone(),
            details: ok.details.clone(),
        })
    );
    // A call that ran and failed ran all the same.
    for (key, kind) in [
        ("tool-error.1", ErrorKind::ToolError),
        ("timeout.1", ErrorKind::Timeout),
        ("trap.1", ErrorKind::Trap),
    ] {
        let failed = response(true, Some(kind));
        tree.record(key.into(), &failed);
        assert_eq!(tree.replayed(key), Some(failed), "{kind:?}");
    }
    assert_eq!(tree.replayed("unknown.1"), None);
}

#[test]
fn a_refused_call_is_not_recorded() {
    let memory = Arc::new(Memory::default());
    let tree = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    for kind in [
        ErrorKind::PermissionDenied,
        ErrorKind::NestedLimit,
        ErrorKind::NotFound,
        ErrorKind::InvalidArguments,
        ErrorKind::Cancelled,
        ErrorKind::Unavailable,
    ] {
        tree.record(format!("{kind:?}.1"), &response(true, Some(kind)));
    }
    // An error without a kind is not known to have run.
    tree.record("no-kind.1".into(), &response(true, None));
    assert!(memory.keys().is_empty(), "{:?}", memory.keys());
}

#[tokio::test]
async fn calls_past_the_budget_are_refused_and_only_the_first_of_them_reported() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let options = CallOptions::new().on_nested(move |event| sink.lock().unwrap().push(event));
    let tree = Tree::new("root", &limits(1, 4, 1 << 20), &options);
    let caller = caller(tree.clone(), 0, ToolTable::default());
    let requests = (0..3).map(|_| request("other", "{}")).collect();
    let responses = caller.clone().call(requests, later()).await;
    let kinds: Vec<_> = responses.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::NestedLimit),
            Some(ErrorKind::NestedLimit),
        ]
    );
    let ids: Vec<_> = responses.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["root.1", "root.2", "root.3"]);
    assert!(responses.iter().all(|r| r.is_error));
    assert!(
        responses[1]
            .output
            .contains("made its 1 nested calls, its limit (`nested_calls`)"),
        "{}",
        responses[1].output
    );
    let (listed, usage) = tree.take_listed();
    let listed: Vec<_> = listed.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(
        listed,
        ["root.1", "root.2"],
        "the third is refused silently"
    );
    assert_eq!(usage.calls, 1);
    assert_eq!(usage.depth, 0, "no call was let through to the path");
    // What crossed back to the caller: the refusals' text.
    let answered: usize = responses.iter().map(|r| r.output.len()).sum();
    assert_eq!(usage.bytes, answered as u64);
    let events = events.lock().unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|event| match event {
            NestedEvent::Call { call_id, .. } => format!("call {call_id}"),
            NestedEvent::Result { result, .. } => format!("result {}", result.call_id),
            NestedEvent::Guest { call_id, .. } => format!("guest {call_id}"),
        })
        .collect();
    assert_eq!(
        seen,
        [
            "call root.1",
            "result root.1",
            "call root.2",
            "result root.2"
        ]
    );
}

#[tokio::test]
async fn a_tool_without_a_calls_grant_may_call_nothing() {
    let tree = tree(&limits(5, 4, 1 << 20));
    let table = ToolTable::from_entries(vec![entry("known", false)]);
    let caller = caller(tree, 0, table);
    let responses = caller
        .clone()
        .call(vec![request("known", "{}")], later())
        .await;
    assert_eq!(responses[0].error_kind, Some(ErrorKind::PermissionDenied));
    let output = &responses[0].output;
    assert!(output.starts_with("`known` was not called"), "{output}");
    assert!(
        output.contains("the component `server` may not call it"),
        "{output}"
    );
    assert!(
        output.contains("its operator granted it no calls to other tools"),
        "{output}"
    );
    assert!(caller.callable().is_empty());
    assert_eq!(
        caller.unknown("nope"),
        "There is no tool named `nope`, and none this tool may call."
    );
}

#[tokio::test]
async fn read_only_calls_asked_together_are_answered_in_order() {
    let tree = tree(&limits(5, 4, 1 << 20));
    let table = ToolTable::from_entries(vec![entry("a", true), entry("b", true)]);
    let caller = caller(tree.clone(), 0, table);
    let requests = vec![request("b", "{}"), request("a", "{}")];
    let responses = caller.clone().call(requests, later()).await;
    let answered: Vec<_> = responses
        .iter()
        .map(|r| (r.call_id.as_str(), r.error_kind))
        .collect();
    assert_eq!(
        answered,
        [
            ("root.1", Some(ErrorKind::PermissionDenied)),
            ("root.2", Some(ErrorKind::PermissionDenied)),
        ]
    );
    assert!(responses[0].output.starts_with("`b` was not called"));
    assert!(responses[1].output.starts_with("`a` was not called"));
    assert_eq!(tree.take_listed().0.len(), 2);
}

#[tokio::test]
async fn a_stopped_tree_starts_no_call() {
    let stop = CancelToken::new();
    stop.cancel();
    let options = CallOptions::new().cancel_token(stop);
    let tree = Tree::new("root", &limits(5, 4, 1 << 20), &options);
    let caller = caller(tree.clone(), 0, ToolTable::default());
    let responses = caller.clone().call(vec![request("t", "{}")], later()).await;
    assert_eq!(responses[0].error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        responses[0].output,
        "`t` was not called: its call tree was stopped."
    );
    assert_eq!(tree.take_listed().1.calls, 1, "counted all the same");
}

#[test]
fn a_call_past_the_depth_is_refused_without_counting_its_bytes() {
    let tree = tree(&limits(5, 2, 100));
    let deep = caller(tree.clone(), 2, ToolTable::default());
    let refused = deep.over_budget("t", 10).expect("past the depth");
    assert!(
        refused.contains("already 2 calls deep, its limit (`nested_depth` = 2)"),
        "{refused}"
    );
    assert_eq!(tree.take_listed().1.bytes, 0);
    let shallow = caller(tree.clone(), 1, ToolTable::default());
    assert_eq!(shallow.over_budget("t", 10), None);
    assert_eq!(tree.take_listed().1.bytes, 10, "counted once let through");
}

#[test]
fn arguments_past_the_bytes_are_refused_naming_both_sizes() {
    let tree = tree(&limits(5, 4, 100));
    let caller = caller(tree.clone(), 0, ToolTable::default());
    assert_eq!(caller.over_budget("t", 60), None);
    let refused = caller.over_budget("t", 60).expect("60 + 60 is past 100");
    assert!(
        refused.starts_with("`t` was not called: its 60 B of arguments"),
        "{refused}"
    );
    assert!(refused.contains("past the 100 B"), "{refused}");
    assert!(refused.contains("(`nested_bytes`)"), "{refused}");
    assert_eq!(tree.take_listed().1.bytes, 60);
}

#[test]
fn a_result_past_the_bytes_is_withheld() {
    let tree = tree(&limits(5, 4, 100));
    let caller = caller(tree.clone(), 0, ToolTable::default());
    let mut result = CallResult::error("t", "root.1".into(), ErrorKind::ToolError, String::new());
    result.is_error = false;
    result.error_kind = None;
    result.output = "x".repeat(60);
    result.details = Some(json!({ "y": "z".repeat(40) }));
    let details = result.details.as_ref().map(Value::to_string);
    assert_eq!(details.as_ref().map(String::len), Some(48));
    assert_eq!(caller.spend_result(&mut result, details), None);
    assert!(result.is_error);
    assert_eq!(result.error_kind, Some(ErrorKind::NestedLimit));
    assert_eq!(result.details, None);
    assert!(
        result
            .output
            .starts_with("The result of `t` (108 B) was withheld"),
        "{}",
        result.output
    );
    assert!(
        result.output.contains("past the 100 B"),
        "{}",
        result.output
    );
    assert_eq!(
        tree.take_listed().1.bytes,
        0,
        "withheld bytes are not counted"
    );
    // A result within the budget passes, counted.
    let mut small = CallResult::error("t", "root.2".into(), ErrorKind::ToolError, "ok".into());
    let kept = caller.spend_result(&mut small, Some("{}".into()));
    assert_eq!(kept.as_deref(), Some("{}"));
    assert_eq!(small.output, "ok");
    assert_eq!(tree.take_listed().1.bytes, 4);
}

#[tokio::test]
async fn a_replayed_call_is_answered_from_the_earlier_run() {
    let memory = Arc::new(Memory::default());
    let recorded = Recorded {
        call_id: "earlier.1".into(),
        is_error: false,
        error_kind: None,
        output: "written".into(),
        details: None,
    };
    let key = format!("{}.1", binding("write", "{}"));
    memory.record(key.clone(), recorded.clone());
    let tree = Tree::new("root", &limits(5, 4, 1 << 20), &replaying(&memory));
    let table = ToolTable::from_entries(vec![entry("write", false)]);
    let caller = caller(tree.clone(), 0, table);
    let first = caller
        .clone()
        .call(vec![request("write", "{}")], later())
        .await;
    assert_eq!(first[0].call_id, "earlier.1");
    assert_eq!(first[0].output, "written");
    assert!(!first[0].is_error);
    // Not run: neither counted nor listed.
    let (listed, usage) = tree.take_listed();
    assert!(listed.is_empty());
    assert_eq!(usage.calls, 0);
    // The second occurrence has no answer: it takes the path, is refused
    // (this caller may call nothing), and the refusal is not kept.
    let second = caller
        .clone()
        .call(vec![request("write", "{}")], later())
        .await;
    assert_eq!(second[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert_eq!(memory.keys(), [key]);
}

#[tokio::test]
async fn read_only_calls_take_no_replay_key() {
    let memory = Arc::new(Memory::default());
    let tree = Tree::new("root", &limits(5, 4, 1 << 20), &replaying(&memory));
    let table = ToolTable::from_entries(vec![entry("read", true), entry("write", false)]);
    let caller = caller(tree.clone(), 0, table);
    caller
        .clone()
        .call(vec![request("read", "{}")], later())
        .await;
    // An unknown tool has no entry to say it has effects: no key either.
    caller
        .clone()
        .call(vec![request("nope", "{}")], later())
        .await;
    caller
        .clone()
        .call(vec![request("write", "{}")], later())
        .await;
    let (_, seen) = tree.replay.as_ref().expect("a replay");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen.get(&binding("write", "{}")), Some(&1));
}

#[test]
fn a_failed_task_is_a_trap_of_its_call() {
    let answer = failed("t");
    assert!(answer.is_error);
    assert_eq!(answer.error_kind, Some(ErrorKind::Trap));
    assert_eq!(
        answer.output,
        "The call to `t` failed in the host before it answered."
    );
}
