//! A stand-in for csi-resizer, for the autogrow tests: it watches the fake
//! API server's claims for a request above the capacity in force (what
//! autogrow's patch makes), calls ControllerExpandVolume for it over the
//! driver's real gRPC socket, and writes the outcome into the claim's
//! status as the resizer does: the new capacity, or
//! `ControllerResizeInfeasible` for an OutOfRange or InvalidArgument answer
//! (what the resizer takes as infeasible). Other answers are retried.

use super::requests::expand_req;
use linode_nfs_csi::fake::FakeKube;
use linode_nfs_csi::proto::csi_grpc::ControllerClient;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

/// The claims it serves: `(namespace, name, volume id)`.
pub type Served = Vec<(String, String, String)>;

/// Runs on a thread of `scope` until dropped.
pub struct Resizer<'scope> {
    stop: Arc<AtomicBool>,
    expansions: Arc<AtomicUsize>,
    thread: Option<ScopedJoinHandle<'scope, ()>>,
}

impl<'scope> Resizer<'scope> {
    /// Starts watching `served` claims of `kube`, expanding through `client`.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        kube: &'env FakeKube,
        client: ControllerClient,
        served: Served,
    ) -> Resizer<'scope> {
        let stop = Arc::new(AtomicBool::new(false));
        let expansions = Arc::new(AtomicUsize::new(0));
        let (stopping, counted) = (stop.clone(), expansions.clone());
        let thread = scope.spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                for (namespace, name, volume) in &served {
                    let Some(claim) = kube.claim(namespace, name) else {
                        continue;
                    };
                    let (Some(requested), capacity) = (claim.requested, claim.capacity) else {
                        continue;
                    };
                    if requested <= capacity.unwrap_or(0) || claim.resize_status.is_some() {
                        continue;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    match client.controller_expand_volume(&expand_req(volume, requested)) {
                        Ok(resp) => kube.change_claim(namespace, name, |c| {
                            c.capacity = Some(resp.capacity_bytes);
                        }),
                        Err(grpcio::Error::RpcFailure(s))
                            if matches!(
                                s.code(),
                                grpcio::RpcStatusCode::OUT_OF_RANGE
                                    | grpcio::RpcStatusCode::INVALID_ARGUMENT
                            ) =>
                        {
                            kube.change_claim(namespace, name, |c| {
                                c.resize_status = Some("ControllerResizeInfeasible".into());
                            })
                        }
                        Err(_) => {}
                    }
                }
                // The resizer's watch, polled.
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Resizer {
            stop,
            expansions,
            thread: Some(thread),
        }
    }

    /// ControllerExpandVolume calls made so far.
    pub fn expansions(&self) -> usize {
        self.expansions.load(Ordering::SeqCst)
    }
}

impl Drop for Resizer<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
