use super::*;
use tokio::io::AsyncReadExt;

/// What `input` reads as through [`Lines`] bounded at `bound`, read in
/// pieces of `piece` bytes.
async fn through(input: &[u8], bound: usize, piece: usize) -> String {
    let reader = tokio_test_reader(input, piece);
    let mut lines = Lines::new(reader, bound);
    let mut out = Vec::new();
    lines.read_to_end(&mut out).await.expect("reads");
    String::from_utf8(out).expect("text")
}

/// A reader handing on `input` at most `piece` bytes at a time.
fn tokio_test_reader(input: &[u8], piece: usize) -> Pieces {
    Pieces {
        left: input.to_vec(),
        piece,
    }
}

struct Pieces {
    left: Vec<u8>,
    piece: usize,
}

impl AsyncRead for Pieces {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = this.left.len().min(this.piece).min(buf.remaining());
        buf.put_slice(&this.left[..n]);
        this.left.drain(..n);
        Poll::Ready(Ok(()))
    }
}

fn scan(text: &str) -> Option<RequestId> {
    let mut scan = Scan::default();
    text.bytes().for_each(|b| scan.byte(b));
    scan.response_id()
}

#[test]
fn the_scan_finds_a_responses_id_wherever_it_is() {
    let number = Some(RequestId::Number(7));
    assert_eq!(scan(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), number);
    assert_eq!(
        scan(r#"{"result":{"id":1,"x":[{"id":2}]},"id": 7 }"#),
        number
    );
    let text = Some(RequestId::String("a,}\"b".into()));
    assert_eq!(scan(r#"{"id":"a,}\"b","result":"x"}"#), text);
    // A key that only looks like `id`, a string value holding one.
    assert_eq!(scan(r#"{"xid":7,"r":"\"id\":3"}"#), None);
    assert_eq!(scan(r#"{"":1,"id":7}"#), number);
}

#[test]
fn the_scan_takes_no_request_or_notification_for_a_response() {
    assert_eq!(scan(r#"{"id":7,"method":"sampling/createMessage"}"#), None);
    assert_eq!(
        scan(r#"{"method":"notifications/progress","params":{}}"#),
        None
    );
    assert_eq!(scan(r#"{"id":{"a":1},"result":1}"#), None);
    let long = format!(r#"{{"id":"{}","result":1}}"#, "x".repeat(1000));
    assert_eq!(scan(&long), None);
}

#[test]
fn the_bound_leaves_room_for_escapes_and_never_falls_below_the_floor() {
    assert_eq!(bound(1024), 16 << 20);
    assert_eq!(bound(4 << 20), (24 << 20) + (64 << 10));
    assert_eq!(bound(usize::MAX), usize::MAX);
}

#[tokio::test]
async fn a_line_within_the_bound_passes_as_it_is() {
    let input = b"{\"id\":1,\"result\":\"abc\"}\n{\"id\":2}\n";
    for piece in [1, 3, 100] {
        let out = through(input, 24, piece).await;
        assert_eq!(out.as_bytes(), input);
    }
}

#[tokio::test]
async fn a_long_response_is_followed_by_its_error_and_the_next_line_goes_on() {
    let long = format!("{{\"result\":\"{}\",\"id\":5}}", "a".repeat(100));
    let input = format!("{long}\n{{\"id\":6,\"result\":1}}\n");
    for piece in [1, 7, 4096] {
        let out = through(input.as_bytes(), 50, piece).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0], long);
        let error: Value = serde_json::from_str(lines[1]).expect("json");
        assert_eq!(error["id"], 5);
        assert_eq!(error["error"]["code"], CODE.0);
        assert_eq!(lines[2], "{\"id\":6,\"result\":1}");
    }
}

#[tokio::test]
async fn a_line_at_the_bound_is_kept_and_one_past_it_is_answered() {
    let line = |n: usize| format!("{{\"id\":1,\"result\":\"{}\"}}", "a".repeat(n));
    let at = line(10);
    let out = through(format!("{at}\n").as_bytes(), at.len(), 8).await;
    assert_eq!(out.lines().count(), 1);
    let past = line(11);
    let out = through(format!("{past}\n").as_bytes(), at.len(), 8).await;
    assert_eq!(out.lines().count(), 2);
}

#[tokio::test]
async fn a_long_request_of_the_servers_gets_no_error() {
    let long = format!(
        "{{\"id\":5,\"method\":\"x\",\"params\":\"{}\"}}",
        "a".repeat(100)
    );
    let out = through(format!("{long}\n").as_bytes(), 50, 16).await;
    assert_eq!(out.lines().count(), 1);
}
