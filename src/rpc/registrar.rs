//! Building a gRPC service one RPC at a time, by how each is run: on the
//! worker pool (`pooled`), on the pool and possibly parked (`parking`), or
//! on the completion queue (`inline`, for answers computed in memory). One
//! literal names each RPC, giving both its method path and its name in logs
//! (see `rpc_name!`). Every service the driver serves is registered here;
//! it knows nothing about what a handler does. What is built per RPC stays
//! small (the request's decoder and the handler's adapter); the rest takes
//! every message as [`Msg`], so it exists once in the binary.

use super::{Msg, Rpc, Unary};
use crate::flow::{done, Step, Then};
use crate::Error;
use grpcio::{GrpcSlice, Marshaller, MessageReader, Method, MethodType, ServiceBuilder};
use protobuf::MessageFull;
use std::sync::Arc;

/// `(full gRPC method name, name in logs)`.
pub type Name = (&'static str, &'static str);

/// The [`Name`] of RPC `$rpc` of the protobuf service `$service`
/// (`"csi.v1.Node"`).
macro_rules! rpc_name {
    ($service:literal, $rpc:literal) => {
        (concat!("/", $service, "/", $rpc), $rpc)
    };
}
pub(crate) use rpc_name;

/// A handler answering at once, its messages erased.
type Answers = Arc<dyn Fn(Msg) -> crate::Result<Msg> + Send + Sync>;
/// A handler that may park, its messages erased.
type Parks = Arc<dyn Fn(Msg) -> Step<Msg> + Send + Sync>;

/// What a handler answers, as the message type the server handles.
fn erased<M: MessageFull>(message: M) -> Msg {
    Box::new(message)
}

/// A request as its method's own type again: the method's marshaller
/// decoded it as that type (see [`method`]).
fn typed<M: MessageFull>(message: Msg) -> M {
    *message
        .downcast_box::<M>()
        .expect("a request is decoded as its method's type")
}

fn decode<M: MessageFull>(reader: MessageReader) -> grpcio::Result<Msg> {
    grpcio::pb_de::<M>(reader).map(erased)
}

fn encode(message: &Msg, buf: &mut GrpcSlice) -> grpcio::Result<()> {
    *buf = GrpcSlice::from(message.write_to_bytes_dyn()?);
    Ok(())
}

/// The method `name` with requests decoded as `Req` and answers encoded
/// whatever their type: the only per-RPC part besides the handler's
/// adapter.
fn method<Req: MessageFull, Resp: MessageFull>(ty: MethodType, name: Name) -> Method<Msg, Msg> {
    Method {
        ty,
        name: name.0,
        req_mar: Marshaller {
            ser: encode,
            de: decode::<Req>,
        },
        resp_mar: Marshaller {
            ser: encode,
            de: decode::<Resp>,
        },
    }
}

/// A service under construction; `S` is the state its handlers share.
pub struct Registrar<S> {
    rpc: Rpc,
    state: Arc<S>,
    builder: ServiceBuilder,
}

impl<S: Send + Sync + 'static> Registrar<S> {
    pub fn new(rpc: Rpc, state: Arc<S>) -> Registrar<S> {
        Registrar {
            rpc,
            state,
            builder: ServiceBuilder::new(),
        }
    }

    /// Runs on the worker pool and answers when done.
    pub fn pooled<Req: MessageFull, Resp: MessageFull>(
        self,
        name: Name,
        f: impl Fn(&Arc<S>, Req) -> crate::Result<Resp> + Send + Sync + 'static,
    ) -> Registrar<S> {
        self.unary(Unary::Pooled, name, f)
    }

    /// Runs on the worker pool and may park; a caller who cancels or whose
    /// deadline passes is answered early (see `Rpc::streamed`).
    pub fn parking<Req: MessageFull, Resp: MessageFull>(
        self,
        name: Name,
        f: impl Fn(&Arc<S>, Req) -> Step<Resp> + Send + Sync + 'static,
    ) -> Registrar<S> {
        let state = self.state.clone();
        let parks: Parks =
            Arc::new(move |req| f(&state, typed(req)).then(|resp| done(erased(resp))));
        let method = method::<Req, Resp>(MethodType::ClientStreaming, name);
        let builder = register(
            self.builder,
            &self.rpc,
            &method,
            name.1,
            Handler::Parking(parks),
        );
        Registrar { builder, ..self }
    }

    /// Answered on the completion queue: for RPCs that never block.
    pub fn inline<Req: MessageFull, Resp: MessageFull>(
        self,
        name: Name,
        f: impl Fn(&Arc<S>, Req) -> crate::Result<Resp> + Send + Sync + 'static,
    ) -> Registrar<S> {
        self.unary(Unary::Inline, name, f)
    }

    /// Answers Unimplemented, inline.
    pub fn unimplemented<Req: MessageFull, Resp: MessageFull>(self, name: Name) -> Registrar<S> {
        self.inline(name, move |_, _: Req| -> crate::Result<Resp> {
            Err(Error::Unimplemented(format!(
                "{}: operation not implemented",
                name.1
            )))
        })
    }

    pub fn build(self) -> grpcio::Service {
        self.builder.build()
    }

    fn unary<Req: MessageFull, Resp: MessageFull>(
        self,
        how: Unary,
        name: Name,
        f: impl Fn(&Arc<S>, Req) -> crate::Result<Resp> + Send + Sync + 'static,
    ) -> Registrar<S> {
        let state = self.state.clone();
        let answers: Answers = Arc::new(move |req| f(&state, typed(req)).map(erased));
        let method = method::<Req, Resp>(MethodType::Unary, name);
        let handler = Handler::Unary(how, answers);
        let builder = register(self.builder, &self.rpc, &method, name.1, handler);
        Registrar { builder, ..self }
    }
}

/// A handler with its messages erased, by how it runs.
enum Handler {
    Unary(Unary, Answers),
    Parking(Parks),
}

/// The registration of a handler, the same code for every RPC and every
/// service.
fn register(
    builder: ServiceBuilder,
    rpc: &Rpc,
    method: &Method<Msg, Msg>,
    log_name: &'static str,
    handler: Handler,
) -> ServiceBuilder {
    let rpc = rpc.clone();
    match handler {
        Handler::Unary(how, answers) => builder.add_unary_handler(method, move |ctx, req, sink| {
            let answers = answers.clone();
            rpc.unary(&ctx, how, log_name, req, sink, move |req| answers(req))
        }),
        Handler::Parking(parks) => {
            builder.add_client_streaming_handler(method, move |ctx, stream, sink| {
                let parks = parks.clone();
                rpc.streamed(&ctx, log_name, stream, sink, move |req| parks(req))
            })
        }
    }
}
