//! How much a single call may consume.
//!
//! Threat model: a tool is untrusted code, and so are the arguments a model
//! sends it. A component can loop forever, block forever in a WASI call,
//! allocate without bound, recurse without bound, or return or print more text
//! than any model context holds. Each limit below ends such a call, and only
//! that call, with its own [`ErrorKind`](crate::ErrorKind); the host and the
//! other calls keep running. The defaults are chosen so that every one of
//! these misbehaviours is stopped without any configuration. The network
//! budgets bound what a granted tool may send, receive and hold open, so a
//! grant to one API is not a pipe of unbounded size or duration.

use std::time::Duration;

/// Per-call limits. Every field has a default, stated on the field; an
/// operator may override them for all components and per component.
///
/// ```
/// use std::time::Duration;
/// use toolcage::Limits;
///
/// let strict = Limits { timeout: Duration::from_secs(5), ..Limits::default() };
/// assert_eq!(strict.memory_bytes, 256 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fuel: a budget of WebAssembly instructions, roughly one unit per
    /// instruction, deterministic across machines. `None` means unlimited (the
    /// timeout still applies). Default: 10 billion units, several seconds of
    /// pure computation. Breach: [`ErrorKind::OutOfFuel`](crate::ErrorKind::OutOfFuel).
    pub fuel: Option<u64>,
    /// Wall-clock time for the call, from instantiation to the returned
    /// outcome. It also stops a guest blocked in a WASI call such as a sleep.
    /// Default: 30 s. Breach: [`ErrorKind::Timeout`](crate::ErrorKind::Timeout).
    pub timeout: Duration,
    /// The most linear memory the instance may grow to, in bytes. Default:
    /// 256 MiB. Breach: [`ErrorKind::MemoryLimit`](crate::ErrorKind::MemoryLimit).
    pub memory_bytes: usize,
    /// The most bytes of `output` plus `details` a call may return. Default:
    /// 1 MiB. Breach: [`ErrorKind::OutputLimit`](crate::ErrorKind::OutputLimit).
    pub output_bytes: usize,
    /// The most bytes of guest stdout, and separately of stderr, kept for the
    /// call's logs. Past it the stream is truncated, silently for the guest:
    /// printing never fails a call. Default: 64 KiB.
    pub log_bytes: usize,
    /// The most bytes of native stack WebAssembly may use; deeper recursion
    /// traps ([`ErrorKind::Trap`](crate::ErrorKind::Trap)). Default: 1 MiB.
    pub stack_bytes: usize,
    /// The most HTTP requests, lookups and TCP connects a call may make
    /// (those refused by the grants do not count; those whose lookup
    /// answered a refused address do). Default: 50. Breach: that request fails with `HTTP-request-denied`,
    /// and [`NetUsage::limit`](crate::NetUsage::limit) says so.
    pub net_requests: u32,
    /// The most request bytes (heads and bodies) a call may send, over all
    /// its requests. Default: 16 MiB. Breach: that request fails with
    /// `HTTP-request-header-section-size` or `HTTP-request-body-size`.
    pub net_bytes_out: u64,
    /// The most response-body bytes a call may receive, over all its
    /// requests, counted as they stream in. Default: 64 MiB. Breach: that
    /// response's body fails with `HTTP-response-body-size`.
    pub net_bytes_in: u64,
    /// The most connections a call may hold open at once. Default: 4.
    /// Breach: that request fails with `connection-limit-reached`.
    pub net_connections: u32,
    /// How long a request may take to resolve, connect and shake hands, and
    /// then wait for the response head after the last byte of its body; a
    /// tool may ask for less, never more, and never past the call's timeout. Default: 10 s. Breach: `connection-timeout` or
    /// `HTTP-response-timeout`.
    pub net_first_byte_timeout: Duration,
    /// How long a response body may stall between two chunks; never past
    /// the call's timeout. Default: 10 s. Breach: that body fails with
    /// `connection-read-timeout`.
    pub net_between_bytes_timeout: Duration,
    /// The most nested calls (a tool calling tools, at any depth) one call
    /// tree may ask for, refused or not, counted from its root, whose limits
    /// apply to the whole tree. Default: 100. Breach: that call is refused with
    /// [`ErrorKind::NestedLimit`](crate::ErrorKind::NestedLimit).
    pub nested_calls: u32,
    /// How deep a call tree may nest: a root calls at depth 1, its callees
    /// at depth 2, and so on. Default: 4. Breach: that call is refused with
    /// [`ErrorKind::NestedLimit`](crate::ErrorKind::NestedLimit).
    pub nested_depth: u32,
    /// The most bytes of arguments and results (output and details) that
    /// may cross `toolcage:tool/tools` in one call tree. Default: 16 MiB.
    /// Breach: that call is refused, or its result withheld, with
    /// [`ErrorKind::NestedLimit`](crate::ErrorKind::NestedLimit).
    pub nested_bytes: u64,
}

impl Limits {
    /// The default fuel budget: 10 billion units.
    pub const DEFAULT_FUEL: u64 = 10_000_000_000;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: Some(Self::DEFAULT_FUEL),
            timeout: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            output_bytes: 1 << 20,
            log_bytes: 64 << 10,
            stack_bytes: 1 << 20,
            net_requests: 50,
            net_bytes_out: 16 << 20,
            net_bytes_in: 64 << 20,
            net_connections: 4,
            net_first_byte_timeout: Duration::from_secs(10),
            net_between_bytes_timeout: Duration::from_secs(10),
            nested_calls: 100,
            nested_depth: 4,
            nested_bytes: 16 << 20,
        }
    }
}

/// A partial set of limits, layered over another: what a config file or a
/// command line says for some limits and leaves to the defaults for the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// Overrides [`Limits::fuel`]; `Some(None)` makes fuel unlimited.
    pub fuel: Option<Option<u64>>,
    /// Overrides [`Limits::timeout`].
    pub timeout: Option<Duration>,
    /// Overrides [`Limits::memory_bytes`].
    pub memory_bytes: Option<usize>,
    /// Overrides [`Limits::output_bytes`].
    pub output_bytes: Option<usize>,
    /// Overrides [`Limits::log_bytes`].
    pub log_bytes: Option<usize>,
    /// Overrides [`Limits::stack_bytes`].
    pub stack_bytes: Option<usize>,
    /// Overrides [`Limits::net_requests`].
    pub net_requests: Option<u32>,
    /// Overrides [`Limits::net_bytes_out`].
    pub net_bytes_out: Option<u64>,
    /// Overrides [`Limits::net_bytes_in`].
    pub net_bytes_in: Option<u64>,
    /// Overrides [`Limits::net_connections`].
    pub net_connections: Option<u32>,
    /// Overrides [`Limits::net_first_byte_timeout`].
    pub net_first_byte_timeout: Option<Duration>,
    /// Overrides [`Limits::net_between_bytes_timeout`].
    pub net_between_bytes_timeout: Option<Duration>,
    /// Overrides [`Limits::nested_calls`].
    pub nested_calls: Option<u32>,
    /// Overrides [`Limits::nested_depth`].
    pub nested_depth: Option<u32>,
    /// Overrides [`Limits::nested_bytes`].
    pub nested_bytes: Option<u64>,
}

impl LimitOverrides {
    /// `base` with every limit this sets replaced.
    pub fn apply(&self, base: Limits) -> Limits {
        Limits {
            fuel: self.fuel.unwrap_or(base.fuel),
            timeout: self.timeout.unwrap_or(base.timeout),
            memory_bytes: self.memory_bytes.unwrap_or(base.memory_bytes),
            output_bytes: self.output_bytes.unwrap_or(base.output_bytes),
            log_bytes: self.log_bytes.unwrap_or(base.log_bytes),
            stack_bytes: self.stack_bytes.unwrap_or(base.stack_bytes),
            net_requests: self.net_requests.unwrap_or(base.net_requests),
            net_bytes_out: self.net_bytes_out.unwrap_or(base.net_bytes_out),
            net_bytes_in: self.net_bytes_in.unwrap_or(base.net_bytes_in),
            net_connections: self.net_connections.unwrap_or(base.net_connections),
            net_first_byte_timeout: self
                .net_first_byte_timeout
                .unwrap_or(base.net_first_byte_timeout),
            net_between_bytes_timeout: self
                .net_between_bytes_timeout
                .unwrap_or(base.net_between_bytes_timeout),
            nested_calls: self.nested_calls.unwrap_or(base.nested_calls),
            nested_depth: self.nested_depth.unwrap_or(base.nested_depth),
            nested_bytes: self.nested_bytes.unwrap_or(base.nested_bytes),
        }
    }

    /// These overrides, then `later` on top of them.
    pub fn then(&self, later: &LimitOverrides) -> LimitOverrides {
        LimitOverrides {
            fuel: later.fuel.or(self.fuel),
            timeout: later.timeout.or(self.timeout),
            memory_bytes: later.memory_bytes.or(self.memory_bytes),
            output_bytes: later.output_bytes.or(self.output_bytes),
            log_bytes: later.log_bytes.or(self.log_bytes),
            stack_bytes: later.stack_bytes.or(self.stack_bytes),
            net_requests: later.net_requests.or(self.net_requests),
            net_bytes_out: later.net_bytes_out.or(self.net_bytes_out),
            net_bytes_in: later.net_bytes_in.or(self.net_bytes_in),
            net_connections: later.net_connections.or(self.net_connections),
            net_first_byte_timeout: later.net_first_byte_timeout.or(self.net_first_byte_timeout),
            net_between_bytes_timeout: later
                .net_between_bytes_timeout
                .or(self.net_between_bytes_timeout),
            nested_calls: later.nested_calls.or(self.nested_calls),
            nested_depth: later.nested_depth.or(self.nested_depth),
            nested_bytes: later.nested_bytes.or(self.nested_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_they_set() {
        let overrides = LimitOverrides {
            fuel: Some(None),
            timeout: Some(Duration::from_millis(5)),
            ..LimitOverrides::default()
        };
        let limits = overrides.apply(Limits::default());
        assert_eq!(limits.fuel, None);
        assert_eq!(limits.timeout, Duration::from_millis(5));
        assert_eq!(limits.memory_bytes, Limits::default().memory_bytes);
    }

    #[test]
    fn later_overrides_win() {
        let first = LimitOverrides {
            memory_bytes: Some(1),
            output_bytes: Some(2),
            ..Default::default()
        };
        let second = LimitOverrides {
            memory_bytes: Some(3),
            ..Default::default()
        };
        let merged = first.then(&second);
        assert_eq!(merged.memory_bytes, Some(3));
        assert_eq!(merged.output_bytes, Some(2));
    }
}
