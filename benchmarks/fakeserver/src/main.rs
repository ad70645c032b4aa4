//! A paced OpenAI-compatible streaming server for measuring HTTP benchmark clients.
//!
//! std only. HTTP/1.1 with keep-alive and TCP_NODELAY, one thread per connection.
//! Each SSE event is its own chunked-transfer chunk. A stream is: a role chunk
//! (chat only), then one content event per `tokens_per_chunk` tokens, the first
//! at TTFT after the request arrived and the rest every ITL on an absolute
//! schedule, then a usage chunk (`choices: []`) and `data: [DONE]`.
//! The output length is the request's max_completion_tokens / max_tokens.
//!
//! GET /stats returns (and resets) how late the server wrote events against its
//! own schedule, so server-side lag can be told apart from client-side lag.
//!
//! usage: fakeserver [--port N] [--ttft-ms F] [--itl-ms F] [--tokens-per-chunk N]
//! Prints "LISTENING <port>" on stdout once bound.

use std::env;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct Config {
    ttft: Duration,
    itl: Duration,
    tokens_per_chunk: u64,
}

#[derive(Default)]
struct Stats {
    events: AtomicU64,
    late_sum_us: AtomicU64,
    late_max_us: AtomicU64,
    late_over_1ms: AtomicU64,
    requests: AtomicU64,
}

fn arg_f64(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("bad number"))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let port = arg_f64(&args, "--port", 0.0) as u16;
    let cfg = Config {
        ttft: Duration::from_secs_f64(arg_f64(&args, "--ttft-ms", 20.0) / 1000.0),
        itl: Duration::from_secs_f64(arg_f64(&args, "--itl-ms", 5.0) / 1000.0),
        tokens_per_chunk: arg_f64(&args, "--tokens-per-chunk", 1.0).max(1.0) as u64,
    };
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    println!("LISTENING {}", listener.local_addr().unwrap().port());
    io::stdout().flush().unwrap();
    let stats = Arc::new(Stats::default());
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let stats = Arc::clone(&stats);
        thread::spawn(move || {
            let _ = serve(stream, cfg, &stats);
        });
    }
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(Some(Request { method, path, body }))
}

fn json_int_after(body: &str, key: &str) -> Option<u64> {
    let at = body.find(key)? + key.len();
    let rest = body[at..].trim_start_matches(|c: char| c == '"' || c == ':' || c.is_whitespace());
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn respond(out: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())
}

fn chunk(out: &mut TcpStream, payload: &str) -> io::Result<()> {
    let event = format!("data: {payload}\n\n");
    out.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
}

fn serve(stream: TcpStream, cfg: Config, stats: &Stats) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader)? {
        let arrived = Instant::now();
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/v1/models") => respond(
                &mut out,
                "200 OK",
                "application/json",
                r#"{"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"fake"}]}"#,
            )?,
            (_, "/flush_cache") => respond(&mut out, "200 OK", "text/plain", "Cache flushed.")?,
            ("GET", "/health") => respond(&mut out, "200 OK", "text/plain", "")?,
            ("GET", "/stats") => {
                let n = stats.events.swap(0, Ordering::Relaxed);
                let body = format!(
                    r#"{{"requests":{},"events":{},"late_mean_us":{:.1},"late_max_us":{},"late_over_1ms":{}}}"#,
                    stats.requests.swap(0, Ordering::Relaxed),
                    n,
                    stats.late_sum_us.swap(0, Ordering::Relaxed) as f64 / n.max(1) as f64,
                    stats.late_max_us.swap(0, Ordering::Relaxed),
                    stats.late_over_1ms.swap(0, Ordering::Relaxed),
                );
                respond(&mut out, "200 OK", "application/json", &body)?
            }
            ("POST", path) if path.starts_with("/v1/") => {
                stream_completion(&mut out, path, &req.body, arrived, cfg, stats)?
            }
            _ => respond(&mut out, "404 Not Found", "text/plain", "not found")?,
        }
    }
    Ok(())
}

fn stream_completion(
    out: &mut TcpStream,
    path: &str,
    body: &[u8],
    arrived: Instant,
    cfg: Config,
    stats: &Stats,
) -> io::Result<()> {
    let text = String::from_utf8_lossy(body);
    let chat = path.contains("chat");
    let tokens = json_int_after(&text, "\"max_completion_tokens\"")
        .or_else(|| json_int_after(&text, "\"max_tokens\""))
        .unwrap_or(128)
        .max(1);
    let prompt_tokens = (body.len() / 4).max(1);
    stats.requests.fetch_add(1, Ordering::Relaxed);
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n",
    )?;
    let (object, head) = if chat {
        ("chat.completion.chunk", "chatcmpl-fake0123456789abcdef")
    } else {
        ("text_completion", "cmpl-fake0123456789abcdef")
    };
    if chat {
        chunk(
            out,
            &format!(
                r#"{{"id":"{head}","object":"{object}","created":1700000000,"model":"fake-model","choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}"#
            ),
        )?;
    }
    let events = tokens.div_ceil(cfg.tokens_per_chunk);
    for k in 0..events {
        let due = arrived + cfg.ttft + cfg.itl * k as u32;
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        let late = Instant::now().saturating_duration_since(due).as_micros() as u64;
        stats.events.fetch_add(1, Ordering::Relaxed);
        stats.late_sum_us.fetch_add(late, Ordering::Relaxed);
        stats.late_max_us.fetch_max(late, Ordering::Relaxed);
        if late > 1000 {
            stats.late_over_1ms.fetch_add(1, Ordering::Relaxed);
        }
        let piece = " tok".repeat(cfg.tokens_per_chunk as usize);
        let finish = if k + 1 == events { r#""length""# } else { "null" };
        let payload = if chat {
            format!(
                r#"{{"id":"{head}","object":"{object}","created":1700000000,"model":"fake-model","choices":[{{"index":0,"delta":{{"content":"{piece}"}},"logprobs":null,"finish_reason":{finish}}}]}}"#
            )
        } else {
            format!(
                r#"{{"id":"{head}","object":"{object}","created":1700000000,"model":"fake-model","choices":[{{"index":0,"text":"{piece}","logprobs":null,"finish_reason":{finish}}}]}}"#
            )
        };
        chunk(out, &payload)?;
    }
    chunk(
        out,
        &format!(
            r#"{{"id":"{head}","object":"{object}","created":1700000000,"model":"fake-model","choices":[],"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{tokens},"total_tokens":{}}}}}"#,
            prompt_tokens as u64 + tokens
        ),
    )?;
    chunk(out, "[DONE]")?;
    out.write_all(b"0\r\n\r\n")
}
