//! Text helpers for what the sandbox tells a caller or a model: cutting a
//! message to a size, and naming sizes and durations the way people read
//! them. A leaf: it imports nothing of the crate.

use std::time::Duration;

/// `text`, cut at `max` bytes (at a character boundary) with `…` added.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `1.5 MiB`, `256 MiB`, `900 B`.
pub(crate) fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `30 s` for whole seconds, else `250 ms`.
pub(crate) fn human_duration(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// `error` and its causes, joined by `: ` (as `anyhow` prints `{:#}`): for
/// where a message must be text.
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_joined() {
        let io = std::io::Error::other("disk on fire");
        let error: Box<dyn std::error::Error + Send + Sync> = Box::new(io);
        assert_eq!(with_causes(&*error), "disk on fire");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read")]
        struct Outer(#[source] std::io::Error);
        let outer = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(with_causes(&outer), "cannot read: disk on fire");
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h…");
        assert_eq!(truncate("hi".into(), 2), "hi");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
    }
}
