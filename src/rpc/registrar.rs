//! Building a gRPC service one RPC at a time, by how each is run: on the
//! worker pool (`pooled`), on the pool and possibly parked (`parking`), or
//! on the completion queue (`inline`, for answers computed in memory). One
//! literal names each RPC, giving both its method path and its name in logs
//! (see `rpc_name!`). Every service the driver serves is registered here;
//! it knows nothing about what a handler does.

use super::Rpc;
use crate::flow::Step;
use crate::Error;
use grpcio::{Marshaller, Method, MethodType, ServiceBuilder};
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

fn method<Req: MessageFull, Resp: MessageFull>(ty: MethodType, name: Name) -> Method<Req, Resp> {
    Method {
        ty,
        name: name.0,
        req_mar: Marshaller {
            ser: grpcio::pb_ser,
            de: grpcio::pb_de,
        },
        resp_mar: Marshaller {
            ser: grpcio::pb_ser,
            de: grpcio::pb_de,
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
        f: fn(&Arc<S>, Req) -> crate::Result<Resp>,
    ) -> Registrar<S> {
        let (rpc, state) = (self.rpc.clone(), self.state.clone());
        let builder = self.builder.add_unary_handler(
            &method::<Req, Resp>(MethodType::Unary, name),
            move |ctx, req, sink| {
                let state = state.clone();
                rpc.spawn(&ctx, name.1, req, sink, move |req| f(&state, req))
            },
        );
        Registrar { builder, ..self }
    }

    /// Runs on the worker pool and may park; a caller who cancels or whose
    /// deadline passes is answered early (see `Rpc::streamed`).
    pub fn parking<Req: MessageFull, Resp: MessageFull>(
        self,
        name: Name,
        f: fn(&Arc<S>, Req) -> Step<Resp>,
    ) -> Registrar<S> {
        let (rpc, state) = (self.rpc.clone(), self.state.clone());
        let builder = self.builder.add_client_streaming_handler(
            &method::<Req, Resp>(MethodType::ClientStreaming, name),
            move |ctx, stream, sink| {
                let state = state.clone();
                rpc.streamed(&ctx, name.1, stream, sink, move |req| f(&state, req))
            },
        );
        Registrar { builder, ..self }
    }

    /// Answered on the completion queue: for RPCs that never block.
    pub fn inline<Req: MessageFull, Resp: MessageFull>(
        self,
        name: Name,
        f: impl Fn(&Arc<S>, Req) -> crate::Result<Resp> + Send + Clone + 'static,
    ) -> Registrar<S> {
        let (rpc, state) = (self.rpc.clone(), self.state.clone());
        let builder = self.builder.add_unary_handler(
            &method::<Req, Resp>(MethodType::Unary, name),
            move |ctx, req, sink| rpc.inline(&ctx, name.1, req, sink, |req| f(&state, req)),
        );
        Registrar { builder, ..self }
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
}
