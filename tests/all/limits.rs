//! Every sandbox limit, obeyed and breached, with the exact error kind. A
//! breach ends only its own call: each test calls again afterwards.

use std::time::{Duration, Instant};

use serde_json::json;
use toolcage::{ErrorKind, LimitOverrides, Limits, Registry};
use toolcage_tests::{
    assert_error, assert_error_at_memory_limit, builder, guests, quick_limits, registry,
};

async fn misbehave(limits: Limits) -> Registry {
    registry(builder().limits(limits), &[guests::FIXTURE_MISBEHAVE]).await
}

/// The host survived: the same registry still serves a good call.
async fn assert_still_serving(registry: &Registry) {
    let result = registry
        .call("misbehave", json!({ "mode": "spin", "amount": 10 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
}

#[tokio::test]
async fn fuel_obeyed() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "spin", "amount": 100_000 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert!(
        result.fuel_used > 100_000,
        "fuel used: {}",
        result.fuel_used
    );
    assert!(result.fuel_used < 2_000_000_000);
}

#[tokio::test]
async fn fuel_breached_by_an_infinite_loop() {
    let limits = Limits {
        fuel: Some(50_000_000),
        timeout: Duration::from_secs(20),
        ..quick_limits()
    };
    let registry = misbehave(limits).await;
    let result = registry.call("misbehave", json!({ "mode": "loop" })).await;
    assert_error(&result, ErrorKind::OutOfFuel);
    assert!(
        result.output.contains("ran out of fuel"),
        "{}",
        result.output
    );
    assert_eq!(result.fuel_used, 50_000_000);
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn default_limits_stop_an_infinite_loop() {
    let registry = misbehave(Limits::default()).await;
    let result = registry.call("misbehave", json!({ "mode": "loop" })).await;
    assert!(
        matches!(
            result.error_kind,
            Some(ErrorKind::OutOfFuel | ErrorKind::Timeout)
        ),
        "{:?}: {}",
        result.error_kind,
        result.output
    );
}

#[tokio::test]
async fn timeout_obeyed() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "sleep", "amount": 20 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output, "woke up");
}

#[tokio::test]
async fn timeout_breached_by_a_loop_with_unlimited_fuel() {
    let limits = Limits {
        fuel: None,
        timeout: Duration::from_millis(300),
        ..quick_limits()
    };
    let registry = misbehave(limits).await;
    let started = Instant::now();
    let result = registry.call("misbehave", json!({ "mode": "loop" })).await;
    assert_error(&result, ErrorKind::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
    assert!(
        result.fuel_used > 0,
        "a lower bound, sampled at epoch ticks"
    );
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn timeout_breached_by_a_guest_sleeping_forever() {
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..quick_limits()
    };
    let registry = misbehave(limits).await;
    let started = Instant::now();
    let result = registry.call("misbehave", json!({ "mode": "sleep" })).await;
    assert_error(&result, ErrorKind::Timeout);
    assert!(result.output.contains("300 ms"), "{}", result.output);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn memory_obeyed() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "allocate", "amount": 16 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output, (16 << 20).to_string());
    // How close it came to the 64 MiB limit: the 16 MiB and the rest of
    // its memory, no more than the limit.
    assert!(
        (16 << 20..=64 << 20).contains(&result.peak_memory_bytes),
        "{}",
        result.peak_memory_bytes
    );
}

#[tokio::test]
async fn memory_breached_by_unbounded_growth() {
    let registry = misbehave(quick_limits()).await;
    let result = registry.call("misbehave", json!({ "mode": "hog" })).await;
    assert_error(&result, ErrorKind::MemoryLimit);
    assert!(result.output.contains("64 MiB"), "{}", result.output);
    // It held up to the limit, never past it.
    assert!(
        (32 << 20..=64 << 20).contains(&result.peak_memory_bytes),
        "{}",
        result.peak_memory_bytes
    );
    let result = registry
        .call("misbehave", json!({ "mode": "allocate", "amount": 80 }))
        .await;
    assert_error(&result, ErrorKind::MemoryLimit);
    assert_still_serving(&registry).await;
}

/// A refusal the guest recovered from (it grew its memory again) does not
/// make a later, unrelated trap a memory-limit breach; the output still says
/// the limit was hit.
#[tokio::test]
async fn a_recovered_memory_refusal_leaves_a_later_trap_a_trap() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "refused_then_panic", "amount": 80 }),
        )
        .await;
    assert_error_at_memory_limit(&result, ErrorKind::Trap, "an unrelated bug");
}

/// A tool that reports its own failure after a refused growth keeps the
/// `tool_error` kind, and the output names the limit it hit.
#[tokio::test]
async fn a_tool_error_after_a_memory_refusal_names_the_limit() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "refused_then_fail", "amount": 80 }),
        )
        .await;
    assert_error_at_memory_limit(&result, ErrorKind::ToolError, "could not load the input");
    assert!(result.output.starts_with("could not load the input"));
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "refused_then_fail", "amount": 8 }),
        )
        .await;
    assert_eq!(result.output, "reserved", "within the limit, no note");
}

#[tokio::test]
async fn output_obeyed() {
    let limits = Limits {
        output_bytes: 4096,
        ..quick_limits()
    };
    let registry = misbehave(limits).await;
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "huge_output", "amount": 4096 }),
        )
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output.len(), 4096);
}

#[tokio::test]
async fn output_breached_by_huge_output() {
    let registry = misbehave(quick_limits()).await;
    // Past the limit, but within what one host call may copy out of the guest.
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "huge_output", "amount": (1 << 20) + 1000 }),
        )
        .await;
    assert_error(&result, ErrorKind::OutputLimit);
    assert!(
        result.output.contains("more than its limit of 1 MiB"),
        "{}",
        result.output
    );
    // Far past it: stopped while being copied, before the host holds it.
    let result = registry
        .call(
            "misbehave",
            json!({ "mode": "huge_output", "amount": 20 << 20 }),
        )
        .await;
    assert_error(&result, ErrorKind::OutputLimit);
    assert!(result.output.contains("at once"), "{}", result.output);
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn stdout_within_bound_is_kept_whole() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "print", "amount": 2048 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.logs.stdout.len(), 2048);
    assert_eq!(result.logs.stderr, "ee");
    assert!(!result.logs.truncated);
}

#[tokio::test]
async fn stdout_flood_is_truncated_and_the_call_succeeds() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "print", "amount": 8 << 20 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(result.output, "printed");
    assert_eq!(result.logs.stdout.len(), 64 << 10);
    assert!(result.logs.truncated);
}

#[tokio::test]
async fn stack_obeyed() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "recurse", "amount": 1000 }))
        .await;
    assert!(!result.is_error, "{}", result.output);
}

#[tokio::test]
async fn stack_breached_by_unbounded_recursion() {
    let registry = misbehave(quick_limits()).await;
    let result = registry
        .call("misbehave", json!({ "mode": "recurse" }))
        .await;
    assert_error(&result, ErrorKind::Trap);
    assert!(result.output.contains("stack"), "{}", result.output);
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn stack_override_per_component() {
    // 200,000 frames need more than the default 1 MiB of stack.
    let deep = json!({ "mode": "recurse", "amount": 200_000 });
    let default_stack = misbehave(quick_limits()).await;
    let result = default_stack.call("misbehave", deep.clone()).await;
    assert_error(&result, ErrorKind::Trap);

    let bigger = LimitOverrides {
        stack_bytes: Some(32 << 20),
        ..LimitOverrides::default()
    };
    let builder = builder()
        .limits(quick_limits())
        .component_limits("fixture_misbehave", bigger);
    let bigger_stack = registry(builder, &[guests::FIXTURE_MISBEHAVE]).await;
    let result = bigger_stack.call("misbehave", deep).await;
    assert!(!result.is_error, "{}", result.output);
}

#[tokio::test]
async fn limits_override_per_component() {
    let tight = LimitOverrides {
        output_bytes: Some(10),
        ..LimitOverrides::default()
    };
    let builder = builder()
        .limits(quick_limits())
        .component_limits("fixture_misbehave", tight);
    let registry = registry(builder, &[guests::FIXTURE_MISBEHAVE, guests::FIXTURE_ECHO]).await;
    let result = registry
        .call("misbehave", json!({ "mode": "huge_output", "amount": 11 }))
        .await;
    assert_error(&result, ErrorKind::OutputLimit);
    let result = registry
        .call("echo", json!({ "text": "not limited to ten bytes" }))
        .await;
    assert!(!result.is_error, "{}", result.output);
}

#[tokio::test]
async fn a_panic_is_a_trap_with_the_panic_message() {
    let registry = misbehave(quick_limits()).await;
    let result = registry.call("misbehave", json!({ "mode": "panic" })).await;
    assert_error(&result, ErrorKind::Trap);
    assert!(
        result.output.contains("panicked on purpose"),
        "{}",
        result.output
    );
    assert_still_serving(&registry).await;
}

#[tokio::test]
async fn argument_size_obeyed_and_breached() {
    let registry = registry(builder().limits(quick_limits()), &[guests::FIXTURE_ECHO]).await;
    let fits = json!({ "text": "x".repeat(90_000) }).to_string();
    let result = registry.call("echo", fits.as_str()).await;
    assert!(!result.is_error, "{}", result.output);
    // Past the ceiling: refused before it is parsed, naming the ceiling.
    let padding = " ".repeat(toolcage::MAX_ARGUMENT_BYTES);
    let too_large = format!("{{\"text\": \"x\"{padding}}}");
    let result = registry.call("echo", too_large).await;
    assert_error(&result, ErrorKind::InvalidArguments);
    assert!(
        result.output.contains("more than the 16 MiB a call takes"),
        "{}",
        result.output
    );
    let result = registry.call("echo", fits.as_str()).await;
    assert!(!result.is_error, "{}", result.output);
}
