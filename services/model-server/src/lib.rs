//! A reference model server that speaks the Open Inference Protocol (KServe V2) over gRPC.
//!
//! It serves a small recommender: given any number of input tensors whose first dimension is the
//! candidate count N (or 1, for a value shared by the request), it returns one `score` (FP32,
//! shape [N]) per candidate, a deterministic function of the inputs. It answers typed requests
//! with typed outputs and raw requests with raw outputs, as Triton does, and refuses malformed
//! tensors with INVALID_ARGUMENT and unknown models with NOT_FOUND. It also serves the standard
//! gRPC health service, which the sidecar must pass through untouched.
//!
//! The demo, the tests and the benchmarks put it behind the sidecar; it is not meant to serve
//! real models.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::inference::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
use featurelog_schemas::inference::{self as pb, model_metadata_response::TensorMetadata};
use featurelog_schemas::tensor::{self, TensorValues};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// The largest message the server accepts or sends.
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// The recommender, serving the models named at construction.
#[derive(Debug, Clone)]
pub struct ReferenceModelServer {
    models: BTreeSet<String>,
    cancelled: Arc<AtomicU64>,
}

/// Counts a call whose handler was dropped before it finished (the caller went away or its
/// deadline passed), so tests can see cancellation reach the model server.
struct CancelGuard(Option<Arc<AtomicU64>>);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(counter) = self.0.take() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl ReferenceModelServer {
    /// A server for the given model names (each one is the same recommender).
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(models: I) -> Self {
        Self {
            models: models.into_iter().map(Into::into).collect(),
            cancelled: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many calls were cancelled before they finished; shared with every clone.
    pub fn cancelled_calls(&self) -> Arc<AtomicU64> {
        self.cancelled.clone()
    }

    fn check_model(&self, name: &str) -> Result<(), Status> {
        if self.models.contains(name) {
            Ok(())
        } else {
            Err(Status::not_found(format!(
                "unknown model {name:?}; this server has {:?}",
                self.models
            )))
        }
    }
}

/// Serves on `listener` until `shutdown` completes, then finishes the calls in flight.
pub async fn serve(
    server: ReferenceModelServer,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<GrpcInferenceServiceServer<ReferenceModelServer>>()
        .await;
    let inference = GrpcInferenceServiceServer::new(server)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(inference)
        // Nagle's algorithm off on every accepted socket: with it, a client that sends one call
        // at a time on a connection waits ~40 ms a call for the delayed ACK.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}

/// A stable weight per input name, so scores depend on which feature carries which value.
fn weight(name: &str) -> f64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    ((h % 2000) as f64 / 1000.0) - 1.0
}

fn bytes_value(b: &[u8]) -> f64 {
    let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    });
    (h % 1000) as f64 / 1000.0
}

fn row_sums(values: &TensorValues, rows: usize, per_row: usize) -> Vec<f64> {
    let numbers: Vec<f64> = match values {
        TensorValues::Bytes(v) => v.iter().map(|b| bytes_value(b)).collect(),
        TensorValues::Half(v) => v.iter().map(|&x| f64::from(x) / 65535.0).collect(),
        other => other.to_f64().unwrap_or_default(),
    };
    (0..rows)
        .map(|r| {
            numbers
                .get(r * per_row..(r + 1) * per_row)
                .map(|s| s.iter().filter(|x| x.is_finite()).sum())
                .unwrap_or(0.0)
        })
        .collect()
}

/// The response stream of ModelStreamInfer.
type InferStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl GrpcInferenceService for ReferenceModelServer {
    type ModelStreamInferStream = InferStream;

    /// Each request of the stream as ModelInfer answers it, in order; a failed one answers with
    /// its error and its id (as Triton does) and the stream goes on.
    async fn model_stream_infer(
        &self,
        request: Request<tonic::Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<InferStream>, Status> {
        let mut requests = request.into_inner();
        let server = self.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let request = match requests.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                let (id, model_name) = (request.id.clone(), request.model_name.clone());
                let answer = match server.model_infer(Request::new(request)).await {
                    Ok(response) => pb::ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(response.into_inner()),
                    },
                    Err(status) => pb::ModelStreamInferResponse {
                        error_message: status.message().to_owned(),
                        infer_response: Some(pb::ModelInferResponse {
                            model_name,
                            id,
                            ..Default::default()
                        }),
                    },
                };
                if tx.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse { ready: true }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let ready = self.models.contains(&request.get_ref().name);
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "featurelog-reference-model-server".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec![],
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let name = request.into_inner().name;
        self.check_model(&name)?;
        Ok(Response::new(pb::ModelMetadataResponse {
            name,
            versions: vec!["1".into()],
            platform: "featurelog-reference".into(),
            inputs: vec![],
            outputs: vec![TensorMetadata {
                name: "score".into(),
                datatype: "FP32".into(),
                shape: vec![-1],
            }],
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let request = request.into_inner();
        self.check_model(&request.model_name)?;
        // A `delay_ms` request parameter makes the model slow, for deadline tests.
        if let Some(pb::infer_parameter::ParameterChoice::Int64Param(ms)) = request
            .parameters
            .get("delay_ms")
            .and_then(|p| p.parameter_choice.clone())
        {
            let mut guard = CancelGuard(Some(self.cancelled.clone()));
            tokio::time::sleep(Duration::from_millis(ms.max(0) as u64)).await;
            guard.0 = None;
        }
        if let Some(other) = request.outputs.iter().find(|o| o.name != "score") {
            return Err(Status::invalid_argument(format!(
                "unknown output {:?}; the model has \"score\"",
                other.name
            )));
        }
        let raw = !request.raw_input_contents.is_empty();
        if raw && request.raw_input_contents.len() != request.inputs.len() {
            return Err(Status::invalid_argument(format!(
                "{} raw_input_contents for {} inputs",
                request.raw_input_contents.len(),
                request.inputs.len()
            )));
        }
        let mut decoded = Vec::with_capacity(request.inputs.len());
        for (i, input) in request.inputs.iter().enumerate() {
            let t = tensor::decode(
                &input.name,
                &input.datatype,
                &input.shape,
                input.contents.as_ref(),
                request.raw_input_contents.get(i),
            )
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
            decoded.push(t);
        }
        let rows = decoded
            .iter()
            .filter_map(|t| t.shape.first().copied())
            .max()
            .unwrap_or(1)
            .max(1) as usize;
        let mut logits = vec![0.0f64; rows];
        for t in &decoded {
            let first = t.shape.first().copied().unwrap_or(1) as usize;
            if first != rows && first != 1 {
                return Err(Status::invalid_argument(format!(
                    "input {:?} has {first} rows, others have {rows}",
                    t.name
                )));
            }
            let per_row = t.values.len().checked_div(first).unwrap_or(0);
            let sums = row_sums(&t.values, first, per_row);
            let w = weight(&t.name);
            for (r, logit) in logits.iter_mut().enumerate() {
                let s = if first == 1 { sums[0] } else { sums[r] };
                *logit += w * s / (per_row.max(1) as f64);
            }
        }
        let scores: Vec<f32> = logits
            .iter()
            .map(|l| (1.0 / (1.0 + (-l).exp())) as f32)
            .collect();
        let values = TensorValues::Fp32(scores);
        let mut output = InferOutputTensor {
            name: "score".into(),
            datatype: DataType::Fp32.protocol_name().unwrap_or("FP32").into(),
            shape: vec![rows as i64],
            ..Default::default()
        };
        let mut raw_output_contents = Vec::new();
        if raw {
            raw_output_contents.push(values.to_raw());
        } else {
            output.contents = Some(values.to_contents());
        }
        Ok(Response::new(pb::ModelInferResponse {
            model_name: request.model_name,
            model_version: if request.model_version.is_empty() {
                "1".into()
            } else {
                request.model_version
            },
            id: request.id,
            parameters: Default::default(),
            outputs: vec![output],
            raw_output_contents,
        }))
    }
}
