//! The parts of nested calls that need no guest: which kinds ran, a tree's
//! budget bookkeeping, the log of a run's calls and its replay, and the refusals a caller
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
struct Memory(Mutex<std::collections::HashMap<String, Recorded>>);

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

    fn spent(&self) -> Duration {
        Duration::ZERO
    }
}

fn replaying(memory: &Arc<Memory>) -> CallOptions {
    let mut options = CallOptions::new();
    options.replay = Some(memory.clone() as Arc<dyn Replay>);
    options
}

/// A call of `tool` with `arguments`, as a log compares it.
fn what_of(tool: &str, arguments: &str) -> What {
    what(&request(tool, arguments))
}

/// What a call alone used: one call, `bytes`, its own entry.
fn alone(bytes: u64, listed: NestedCall) -> Used {
    Used {
        calls: 1,
        bytes,
        listed: vec![listed],
    }
}

/// A caller at `depth` in `tree`, whose tool (upstream) may call nothing,
/// looking tools up in `table`.
fn caller(tree: Arc<Tree>, depth: u32, table: ToolTable) -> Arc<Caller> {
    Arc::new(Caller {
        table: Arc::new(table),
        tree,
        depth,
        position: String::new(),
        made: AtomicU32::new(0),
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
fn a_tree_without_a_replay_logs_nothing() {
    let tree = tree(&limits(5, 4, 100));
    assert_eq!(tree.logged("1"), None);
    // Nothing to record into: no panic, nothing kept.
    let used = alone(3, nested_call(1));
    tree.record("1".into(), what_of("t", "{}"), used, &response(false, None));
}

#[test]
fn a_binding_keeps_the_tool_and_the_arguments_apart() {
    assert_ne!(what_of("ab", "c").1, what_of("a", "bc").1);
    assert_ne!(what_of("t", "{}").1, what_of("t", "{ }").1);
    assert_eq!(what_of("t", "{}"), what_of("t", "{}"));
}

#[test]
fn a_call_that_ran_is_logged_at_its_place_and_replayed_counted_and_listed() {
    let memory = Arc::new(Memory::default());
    let first = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    let ok = response(false, None);
    let mut below = nested_call(2);
    below.parent_call_id = "root.1".into();
    below.depth = 2;
    let used = Used {
        calls: 2,
        bytes: 30,
        listed: vec![below, nested_call(1)],
    };
    first.record("1".into(), what_of("t", "{}"), used, &ok);
    let kept = memory.recorded("1").expect("kept");
    assert_eq!(
        (kept.call_id.as_str(), kept.calls, kept.bytes),
        (".1", 2, 30)
    );
    let ids: Vec<_> = kept
        .listed
        .iter()
        .map(|c| (c.call_id.as_str(), c.parent_call_id.as_str()))
        .collect();
    assert_eq!(ids, [(".2", ".1"), (".1", "")], "ids without their root's");

    // A later attempt, whose root has another id, gets the answer and
    // counts and lists the calls again, under its own root.
    let again = Tree::new("again", &limits(5, 4, 100), &replaying(&memory));
    let answer = again.replay(again.logged("1").expect("logged"));
    assert_eq!(answer.call_id, "again.1");
    assert_eq!((answer.output.as_str(), answer.is_error), ("out", false));
    assert_eq!(again.count(), 3, "its next call is the third of the run");
    let (listed, usage) = again.take_listed();
    let ids: Vec<_> = listed
        .iter()
        .map(|c| (c.call_id.as_str(), c.parent_call_id.as_str()))
        .collect();
    assert_eq!(ids, [("again.2", "again.1"), ("again.1", "again")]);
    assert_eq!((usage.calls, usage.bytes, usage.depth), (3, 30, 2));
    // A call that ran and failed ran all the same.
    for (place, kind) in [
        ("2", ErrorKind::ToolError),
        ("3", ErrorKind::Timeout),
        ("4", ErrorKind::Trap),
    ] {
        let failed = response(true, Some(kind));
        first.record(
            place.into(),
            what_of("t", "{}"),
            alone(1, nested_call(1)),
            &failed,
        );
        assert_eq!(
            memory.recorded(place).map(|r| r.error_kind),
            Some(Some(kind))
        );
    }
    assert_eq!(first.logged("9"), None);
}

#[test]
fn a_stopped_or_spent_tree_replays_nothing() {
    let memory = Arc::new(Memory::default());
    let recorded = |tree: &Tree| {
        let used = alone(1, nested_call(1));
        tree.record("1".into(), what_of("t", "{}"), used, &response(false, None));
    };
    let spent = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    recorded(&spent);
    spent.spent.store(true, Ordering::SeqCst);
    assert_eq!(spent.logged("1"), None);
    let stop = CancelToken::new();
    let stopped = Tree::new(
        "root",
        &limits(5, 4, 100),
        &replaying(&memory).cancel_token(stop.clone()),
    );
    assert!(stopped.logged("1").is_some());
    stop.cancel();
    assert_eq!(stopped.logged("1"), None);
}

#[test]
fn a_refused_call_is_not_logged() {
    let memory = Arc::new(Memory::default());
    let tree = Tree::new("root", &limits(5, 4, 100), &replaying(&memory));
    let kinds = [
        ErrorKind::PermissionDenied,
        ErrorKind::NestedLimit,
        ErrorKind::NotFound,
        ErrorKind::InvalidArguments,
        ErrorKind::Cancelled,
        ErrorKind::Unavailable,
    ];
    for (n, kind) in kinds.into_iter().enumerate() {
        let used = alone(1, nested_call(n));
        tree.record(
            n.to_string(),
            what_of("t", "{}"),
            used,
            &response(true, Some(kind)),
        );
    }
    // An error without a kind is not known to have run.
    let used = alone(1, nested_call(9));
    tree.record("9".into(), what_of("t", "{}"), used, &response(true, None));
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

/// A log holding, at place 1, a write of `{}` that answered "written".
fn logged_write() -> Arc<Memory> {
    let memory = Arc::new(Memory::default());
    let (tool, binding) = what_of("write", "{}");
    let mut listed = nested_call(1);
    listed.call_id = ".1".into();
    listed.parent_call_id = String::new();
    let recorded = Recorded {
        tool,
        binding,
        call_id: ".1".into(),
        is_error: false,
        error_kind: None,
        output: "written".into(),
        details: None,
        calls: 1,
        bytes: 9,
        listed: vec![listed],
    };
    memory.record("1".into(), recorded);
    memory
}

#[tokio::test]
async fn a_call_at_a_logged_place_is_answered_from_the_log_and_counted() {
    let memory = logged_write();
    let tree = Tree::new("root", &limits(5, 4, 1 << 20), &replaying(&memory));
    let table = ToolTable::from_entries(vec![entry("write", false)]);
    let caller = caller(tree.clone(), 0, table);
    let first = caller
        .clone()
        .call(vec![request("write", "{}")], later())
        .await;
    assert_eq!(first[0].call_id, "root.1");
    assert_eq!(first[0].output, "written");
    assert!(!first[0].is_error);
    // The second call (the same again) is not logged: it takes the path,
    // is refused (this caller may call nothing), and is not kept.
    let second = caller
        .clone()
        .call(vec![request("write", "{}")], later())
        .await;
    assert_eq!(second[0].error_kind, Some(ErrorKind::PermissionDenied));
    assert_eq!(second[0].call_id, "root.2");
    assert_eq!(memory.keys(), ["1"]);
    // Both counted and listed, as one run.
    let (listed, usage) = tree.take_listed();
    let ids: Vec<_> = listed.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["root.1", "root.2"]);
    assert_eq!(usage.calls, 2);
    assert_eq!(tree.diverged(), None);
}

#[tokio::test]
async fn a_call_that_is_not_the_logged_one_ends_the_run_naming_it() {
    let memory = logged_write();
    let tree = Tree::new("root", &limits(5, 4, 1 << 20), &replaying(&memory));
    let table = ToolTable::from_entries(vec![entry("write", false), entry("edit", false)]);
    let caller = caller(tree.clone(), 0, table);
    let diverged = caller
        .clone()
        .call(vec![request("write", r#"{"other":1}"#)], later())
        .await;
    assert!(diverged[0].is_error);
    let said = &diverged[0].output;
    assert!(said.contains("diverged from its earlier attempt"), "{said}");
    assert!(
        said.contains("at 1 is now `write` again, with other arguments"),
        "{said}"
    );
    assert_eq!(tree.diverged().as_ref(), Some(said));
    // The run ends: the next call is refused, and nothing was kept.
    let next = caller
        .clone()
        .call(vec![request("edit", "{}")], later())
        .await;
    assert_eq!(next[0].error_kind, Some(ErrorKind::NestedLimit));
    assert_eq!(memory.keys(), ["1"]);

    let other_tool = Tree::new("root", &limits(5, 4, 1 << 20), &replaying(&memory));
    let table = ToolTable::from_entries(vec![entry("edit", false)]);
    let caller = self::caller(other_tool.clone(), 0, table);
    let diverged = caller.call(vec![request("edit", "{}")], later()).await;
    let said = &diverged[0].output;
    assert!(
        said.contains("at 1 is now `edit`, where it called `write`"),
        "{said}"
    );
}

#[test]
fn a_callers_calls_have_places_under_its_own() {
    let root = caller(tree(&limits(5, 4, 100)), 0, ToolTable::default());
    assert_eq!([root.next_position(), root.next_position()], ["1", "2"]);
    let nested = Caller {
        table: root.table.clone(),
        tree: root.tree.clone(),
        depth: 1,
        position: "2".into(),
        made: AtomicU32::new(0),
        call_id: "root.2".into(),
        entry: root.entry.clone(),
        tracer: None,
    };
    assert_eq!(
        [nested.next_position(), nested.next_position()],
        ["2.1", "2.2"]
    );
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
