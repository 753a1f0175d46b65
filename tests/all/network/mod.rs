//! The network as a tool sees it, against real HTTP and HTTPS servers on
//! 127.0.0.1 and 127.0.0.2 (the second stands for an internal service that
//! must never be reached). Names are mapped to loopback by the library's
//! resolver seam, never `/etc/hosts`. Every destination a tool is told to
//! try is on loopback, except in the one test that runs in a network
//! namespace of its own with nothing but loopback (`unshare --net`), so no
//! packet leaves this machine even were the sender wrong.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolcage::{
    CallOptions, CallResult, CancelToken, Cidr, ErrorKind, Grant, GuestEvent, Limits, LogLevel,
    NetLimit, Registry, RegistryBuilder, Runtime,
};
use toolcage_tests::net::{Server, TcpEcho, TestCa, UdpEcho};
use toolcage_tests::{builder, guests, quick_limits, registry};

mod addresses;
mod budgets;
mod grants;
mod sockets;
mod tls;

fn grant(pattern: &str) -> Grant {
    Grant::parse(pattern).unwrap()
}

fn cidr(text: &str) -> Cidr {
    text.parse().unwrap()
}

async fn netprobe(builder: RegistryBuilder) -> Registry {
    registry(builder, &[guests::FIXTURE_NETPROBE]).await
}

/// The netprobe fixture, granted `http://{authority}` only, under `limits`.
async fn granted(authority: &str, limits: Limits) -> Registry {
    netprobe(
        builder()
            .limits(limits)
            .allow_net(grant(&format!("http://{authority}"))),
    )
    .await
}

async fn probe(registry: &Registry, requests: Value) -> (CallResult, Vec<GuestEvent>) {
    probe_with(registry, requests, CallOptions::new()).await
}

async fn probe_with(
    registry: &Registry,
    requests: Value,
    options: CallOptions,
) -> (CallResult, Vec<GuestEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let options = options.on_event(move |event| seen.lock().unwrap().push(event));
    let result = registry
        .call_with("netprobe", json!({ "requests": requests }), options)
        .await;
    let events = events.lock().unwrap().clone();
    (result, events)
}

/// The per-request reports of a call that must have succeeded.
fn reports(result: &CallResult) -> Vec<Value> {
    assert!(!result.is_error, "{}", result.output);
    result.details.clone().unwrap().as_array().unwrap().clone()
}

fn error_of(report: &Value) -> &str {
    report["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {report}"))
}

/// Each name's answers, in the order they are given.
type Answers = Vec<(String, Vec<Vec<IpAddr>>)>;

/// A resolver mapping test names to chosen addresses, counting lookups.
#[derive(Clone, Default)]
struct Names {
    map: Arc<Mutex<Answers>>,
    lookups: Arc<AtomicUsize>,
}

impl Names {
    /// `name` answers `answers` in turn, the last one from then on.
    fn with(self, name: &str, answers: &[&[&str]]) -> Self {
        let answers = answers
            .iter()
            .map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect())
            .collect();
        self.map.lock().unwrap().push((name.to_string(), answers));
        self
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::Acquire)
    }

    fn resolver(&self) -> impl toolcage::Resolve {
        let names = self.clone();
        move |name: &str| -> std::io::Result<Vec<IpAddr>> {
            names.lookups.fetch_add(1, Ordering::AcqRel);
            let mut map = names.map.lock().unwrap();
            match map.iter_mut().find(|(n, _)| n == name) {
                Some((_, answers)) if answers.len() > 1 => Ok(answers.remove(0)),
                Some((_, answers)) => Ok(answers[0].clone()),
                None => Err(std::io::ErrorKind::NotFound.into()),
            }
        }
    }
}

async fn sockprobe(registry: &Registry, ops: Value) -> CallResult {
    registry.call("sockprobe", json!({ "ops": ops })).await
}
