//! A script's session: the interpreter a run starts from, restored from
//! what the last run of the same session saved, and saved again when it
//! ends.
//!
//! Threat model: the host keeps a session for its caller alone, and only
//! from this component's own saves, so what is loaded here is what an
//! earlier run of this caller left. It is still read as untrusted bytes:
//! one this build cannot read (another Monty version, damage) starts the
//! run afresh and says so, and its limits are this run's, never those it
//! was saved with.
//!
//! A session may hold megabytes, and every run reads and writes it whole,
//! in a fresh instance whose every page it touches is reset after the call.
//! So its dump is written once into a buffer of its exact size (see
//! [`dump`]), not grown by doubling and then copied behind a header.

use monty::{DUMP_VERSION, Dump, MontyRepl, Session, SessionRef};
use serde::Serialize;
use serde_json::{Value, json};
use toolcage_guest::session;

use crate::script::{SCRIPT, tracker};

/// How a run found its session.
#[derive(Debug, Clone, PartialEq)]
pub enum Restored {
    /// From what its last run saved.
    Yes,
    /// Nothing was saved under it (or it expired): it starts empty.
    New,
    /// What was saved could not be read back, for this reason: it starts
    /// empty.
    Lost(String),
}

/// The interpreter a run starts from.
pub struct Opened {
    /// `None`: a fresh one.
    pub repl: Option<MontyRepl>,
    pub restored: Restored,
}

impl Opened {
    /// A run without a session.
    pub fn fresh() -> Self {
        Opened {
            repl: None,
            restored: Restored::New,
        }
    }
}

/// The session `name`, as its last run left it.
pub fn open(name: &str) -> Opened {
    let lost = |why: String| Opened {
        repl: None,
        restored: Restored::Lost(why),
    };
    let bytes = match session::load(name) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Opened::fresh(),
        Err(why) => return lost(format!("the host could not read it: {why}")),
    };
    match Dump::load(&bytes).map(|dump| dump.state) {
        Ok(Session::Idle(repl)) => {
            let mut repl = *repl;
            *repl.tracker_mut() = tracker();
            Opened {
                repl: Some(repl),
                restored: Restored::Yes,
            }
        }
        Ok(_) => lost("it was saved mid-run".to_string()),
        Err(e) => lost(format!("this interpreter cannot read it ({e})")),
    }
}

/// What became of a run's session.
pub struct Kept {
    pub name: String,
    pub restored: Restored,
    /// Its size, when it was saved; why not, when it was not.
    pub saved: Result<usize, String>,
}

/// Saves `repl`, the interpreter a run of session `name` ended with.
pub fn keep(name: &str, restored: Restored, repl: &MontyRepl) -> Kept {
    let saved = match dump(repl) {
        Err(e) => Err(format!("its state could not be written ({e})")),
        Ok(bytes) => session::save(name, &bytes).map(|()| bytes.len()),
    };
    Kept {
        name: name.to_string(),
        restored,
        saved,
    }
}

/// `repl` as `monty::dump` writes it, byte for byte (a test holds them
/// equal), in one allocation of its exact size: Monty's own grows its
/// buffer by doubling, then copies it whole behind the header, which for a
/// 1 MiB session touches about 4 MiB of the instance's memory.
fn dump(repl: &MontyRepl) -> Result<Vec<u8>, postcard::Error> {
    /// Monty's `DumpRef`, without type checking (code mode never asks for
    /// it): postcard writes a `None` the same whatever its type.
    #[derive(Serialize)]
    struct Framed<'a> {
        script_name: &'a str,
        type_check: Option<()>,
        state: SessionRef<'a>,
    }
    /// Monty's header: its magic, then the dump format's version.
    const MAGIC: &[u8] = b"MONTY\0";
    let framed = Framed {
        script_name: SCRIPT,
        type_check: None,
        state: SessionRef::Idle(repl),
    };
    let size = postcard::experimental::serialized_size(&framed)?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 2 + size);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&DUMP_VERSION.to_le_bytes());
    postcard::to_extend(&framed, bytes)
}

impl Kept {
    /// What the model reads of it: nothing when all went well, else a line
    /// saying what did not. A run that `raised` in a session that started
    /// empty says so too: its globals are not what the model may expect
    /// (the session expired, or the store that held it was emptied).
    pub fn note(&self, raised: bool) -> Option<String> {
        let name = &self.name;
        let lost = match &self.restored {
            Restored::Lost(why) => Some(format!(
                "[session \"{name}\" could not be restored ({why}): this run started it empty.]"
            )),
            Restored::New if raised => Some(format!(
                "[session \"{name}\" started empty: nothing was kept under this name (it is new, it was idle past its expiry, or the server's store lost it).]"
            )),
            _ => None,
        };
        let unsaved = self.saved.as_ref().err().map(|why| {
            format!("[session \"{name}\" was not saved: {why}. The next run of it starts from what was saved before this one.]")
        });
        let lines: Vec<String> = lost.into_iter().chain(unsaved).collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// It as the result's details say it.
    pub fn details(&self) -> Value {
        let restored = match &self.restored {
            Restored::Yes => json!(true),
            Restored::New => json!(false),
            Restored::Lost(why) => json!({ "lost": why }),
        };
        match &self.saved {
            Ok(bytes) => {
                json!({ "name": self.name, "restored": restored, "saved": true, "bytes": bytes })
            }
            Err(why) => {
                json!({ "name": self.name, "restored": restored, "saved": false, "why": why })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use monty_types::{CompileOptions, PrintWriter};

    #[test]
    fn a_dump_is_monty_s_own_byte_for_byte_in_a_buffer_of_its_size() {
        let mut repl = MontyRepl::new(SCRIPT, tracker(), CompileOptions::default());
        let code = "big = 'x' * 100000\nd = {'a': [1, 2.5, None], 'b': (True, b'y')}\ndef f(x):\n    return x + 1\nn = f(41)";
        repl.feed_run(code, vec![], PrintWriter::Disabled).unwrap();
        let ours = dump(&repl).unwrap();
        let monty = monty::dump(SCRIPT, None, SessionRef::Idle(&repl)).unwrap();
        assert_eq!(ours, monty);
        assert_eq!(ours.capacity(), ours.len());
        let Session::Idle(mut back) = Dump::load(&ours).unwrap().state else {
            panic!("an idle session loads idle");
        };
        let n = back.feed_run("n", vec![], PrintWriter::Disabled).unwrap();
        assert_eq!(
            format!("{n:?}"),
            format!("{:?}", monty_types::MontyObject::Int(42))
        );
    }
}
