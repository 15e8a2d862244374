//! The single reply helper: every RPC's answer goes through [`Responder::send`],
//! which logs method, duration and code, records them in
//! `csi_rpc_duration_seconds`, logs bodies at debug with every `csi_secret`
//! field redacted, and completes the gRPC sink. It may be called
//! from any thread; it chooses no gRPC codes itself (`crate::error` does).

use super::Msg;
use crate::proto::csi::exts;
use crate::Error;
use grpcio::{ClientStreamingSink, UnarySink};
use protobuf::reflect::{ReflectValueBox, RuntimeFieldType};
use protobuf::MessageDyn;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// The two sink shapes our handlers hold: plain unary calls, and the
/// long-running RPCs registered as client-streaming so that a caller who
/// cancels can be noticed (see `Rpc::streamed`).
pub(crate) enum Sink {
    Unary(UnarySink<Msg>),
    Streamed(ClientStreamingSink<Msg>),
}

/// Completion of a reply's delivery.
pub(crate) type Sending = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One accepted call's answer-to-be.
pub(crate) struct Responder {
    method: &'static str,
    started: Instant,
    sink: Sink,
}

impl Responder {
    pub(crate) fn new(method: &'static str, started: Instant, sink: Sink) -> Responder {
        Responder {
            method,
            started,
            sink,
        }
    }

    pub(crate) fn method(&self) -> &'static str {
        self.method
    }

    /// Logs the outcome and starts sending it; the future finishes the send.
    pub(crate) fn send(self, result: crate::Result<Msg>) -> Sending {
        let method = self.method;
        let elapsed = self.started.elapsed();
        let ms = elapsed.as_secs_f64() * 1000.0;
        let code = match &result {
            Ok(_) => grpcio::RpcStatusCode::OK,
            Err(err) => err.code(),
        };
        crate::metrics::rpc_answered(method, code, elapsed);
        let status = match result {
            Ok(resp) => {
                log::log!(level_for(method), "{method} OK in {ms:.1}ms");
                if log::log_enabled!(log::Level::Debug) {
                    log::debug!("{method} response: {}", redacted(&*resp));
                }
                Ok(resp)
            }
            Err(err) => {
                let level = match err {
                    Error::Internal(_) | Error::DeadlineExceeded(_) => log::Level::Warn,
                    _ => level_for(method),
                };
                log::log!(
                    level,
                    "{method} {:?} in {ms:.1}ms: {}",
                    err.code(),
                    err.message()
                );
                Err(err.into())
            }
        };
        let sending: Pin<Box<dyn Future<Output = grpcio::Result<()>> + Send>> =
            match (self.sink, status) {
                (Sink::Unary(s), Ok(r)) => Box::pin(s.success(r)),
                (Sink::Unary(s), Err(e)) => Box::pin(s.fail(e)),
                (Sink::Streamed(s), Ok(r)) => Box::pin(s.success(r)),
                (Sink::Streamed(s), Err(e)) => Box::pin(s.fail(e)),
            };
        Box::pin(async move {
            if let Err(e) = sending.await {
                log::debug!("{method}: reply not delivered: {e}");
            }
        })
    }
}

/// Probe and stats are polled constantly; logging them at info would drown
/// everything else.
fn level_for(method: &str) -> log::Level {
    match method {
        "Probe" | "NodeGetVolumeStats" => log::Level::Debug,
        _ => log::Level::Info,
    }
}

pub(crate) fn log_request(method: &str, req: &dyn MessageDyn) {
    if log::log_enabled!(log::Level::Debug) {
        log::debug!("{method} request: {}", redacted(req));
    }
}

/// The message in text form with every field marked `csi_secret` in the CSI
/// proto replaced: map values and strings become `***`.
pub fn redacted(msg: &dyn MessageDyn) -> String {
    let mut copy = msg.clone_box();
    redact(&mut *copy);
    protobuf::text_format::print_to_string(&*copy)
}

fn redact(msg: &mut dyn MessageDyn) {
    let descriptor = msg.descriptor_dyn();
    for field in descriptor.fields() {
        let secret = field
            .proto()
            .options
            .as_ref()
            .and_then(|o| exts::csi_secret.get(o))
            .unwrap_or(false);
        match field.runtime_field_type() {
            RuntimeFieldType::Map(..) if secret => {
                let keys: Vec<ReflectValueBox> = field
                    .get_map(&*msg)
                    .into_iter()
                    .map(|(k, _)| k.to_box())
                    .collect();
                let mut map = field.mut_map(msg);
                for k in keys {
                    map.insert(k, ReflectValueBox::String("***".to_string()));
                }
            }
            RuntimeFieldType::Singular(_) if secret && field.has_field(&*msg) => {
                field.set_singular_field(msg, ReflectValueBox::String("***".to_string()));
            }
            RuntimeFieldType::Singular(protobuf::reflect::RuntimeType::Message(_))
                if field.has_field(&*msg) =>
            {
                redact(field.mut_message(msg));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::csi;

    #[test]
    fn secrets_are_redacted_and_the_rest_kept() {
        let mut req = csi::NodeStageVolumeRequest::new();
        req.volume_id = "1/2".into();
        req.secrets.insert("password".into(), "hunter2".into());
        req.volume_context
            .insert("mount-target".into(), "fs.example:/x".into());
        let text = redacted(&req);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("password"), "{text}");
        assert!(text.contains("***"), "{text}");
        assert!(text.contains("fs.example:/x"), "{text}");
        // The original is untouched.
        assert_eq!(req.secrets["password"], "hunter2");
    }
}
