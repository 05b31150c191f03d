//! akripeer: Akri's discovery gRPC protocol (v0 `discovery.proto`) on Akri's own stack — tonic
//! 0.13 over h2 0.4 and tokio, Unix sockets wired the way Akri's discovery-utils wires them — so
//! edgehub's tests meet the HTTP/2 peer that Akri's binaries are, not another grpc-python.
//!
//! Modes (every event is one JSON object on one stdout line, for tests to wait on):
//!
//! * `handler --socket PATH --register PATH [--name NAME] [--shared] [--device ID]...`
//!   A debugEcho-like discovery handler. Like Akri's handlers it registers with the agent's
//!   registration socket FIRST and only then binds its own socket (the order that exposes an
//!   agent which insists the socket exists at registration). A failed registration is fatal,
//!   as it is for Akri's handlers: it prints `register-failed` and exits 1. `Discover` answers
//!   one response listing every `--device` (id, and `DEBUG_ECHO_DESCRIPTION` = id) and keeps the
//!   stream open until the caller leaves.
//! * `registration --socket PATH [--details TEXT]`
//!   An agent's registration server. Each `RegisterDiscoveryHandler` is printed (`registered`),
//!   then the peer connects back to the registered endpoint and calls `Discover` with TEXT as
//!   discovery details, printing each response (`devices`) or the failure (`discover-error`).
//! * `reset --socket PATH`
//!   Speaks bare HTTP/2 (h2, the layer under tonic) and answers every stream with `RST_STREAM`
//!   PROTOCOL_ERROR: what h2 does to a request it finds malformed (e.g. an `:authority` that is
//!   not one). Each reset is printed (`reset`, with the `:authority` received).

use std::pin::Pin;

use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status};

pub mod v0 {
    tonic::include_proto!("v0");
}

use v0::discovery_handler_client::DiscoveryHandlerClient;
use v0::discovery_handler_server::{DiscoveryHandler, DiscoveryHandlerServer};
use v0::register_discovery_handler_request::EndpointType;
use v0::registration_client::RegistrationClient;
use v0::registration_server::{Registration, RegistrationServer};

const DESCRIPTION: &str = "DEBUG_ECHO_DESCRIPTION";

fn emit(event: serde_json::Value) {
    // println! goes through a LineWriter: one flushed line per event, even into a pipe.
    println!("{event}");
}

fn usage() -> ! {
    eprintln!(
        "usage: akripeer handler --socket PATH --register PATH [--name NAME] [--shared] [--device ID]...\n       akripeer registration --socket PATH [--details TEXT]\n       akripeer reset --socket PATH"
    );
    std::process::exit(2);
}

#[derive(Default)]
struct Args {
    socket: Option<String>,
    register: Option<String>,
    name: Option<String>,
    details: Option<String>,
    shared: bool,
    devices: Vec<String>,
}

fn parse(rest: &[String]) -> Args {
    let mut args = Args::default();
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--socket" => args.socket = Some(value()),
            "--register" => args.register = Some(value()),
            "--name" => args.name = Some(value()),
            "--details" => args.details = Some(value()),
            "--device" => args.devices.push(value()),
            "--shared" => args.shared = true,
            _ => usage(),
        }
    }
    args
}

/// A channel over a Unix socket, as Akri's discovery-utils builds one: the URI is a placeholder
/// (it only supplies the :authority tonic sends), the connector dials the socket.
async fn uds_channel(path: String) -> Result<Channel, tonic::transport::Error> {
    Endpoint::try_from("http://[::1]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

fn bind(path: &str) -> std::io::Result<UnixListener> {
    if let Some(parent) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    UnixListener::bind(path)
}

fn status_json(event: &str, peer: &str, status: &Status) -> serde_json::Value {
    json!({
        "event": event,
        "peer": peer,
        "code": format!("{:?}", status.code()),
        "message": status.message(),
    })
}

// ---- handler mode ---------------------------------------------------------------------------

struct EchoHandler {
    devices: Vec<String>,
}

type DiscoverStream = Pin<Box<dyn Stream<Item = Result<v0::DiscoverResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DiscoveryHandler for EchoHandler {
    type DiscoverStream = DiscoverStream;

    async fn discover(
        &self,
        request: Request<v0::DiscoverRequest>,
    ) -> Result<Response<Self::DiscoverStream>, Status> {
        emit(json!({"event": "discover", "details": request.get_ref().discovery_details}));
        let devices = self
            .devices
            .iter()
            .map(|id| v0::Device {
                id: id.clone(),
                properties: [(DESCRIPTION.to_string(), id.clone())].into_iter().collect(),
                mounts: vec![],
                device_specs: vec![],
            })
            .collect();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            if tx.send(Ok(v0::DiscoverResponse { devices })).await.is_ok() {
                // A discovery stream stays open while its caller listens.
                tx.closed().await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn run_handler(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let socket = args.socket.unwrap_or_else(|| usage());
    let register = args.register.unwrap_or_else(|| usage());
    let name = args.name.unwrap_or_else(|| "debugEcho".to_string());
    let request = v0::RegisterDiscoveryHandlerRequest {
        name: name.clone(),
        endpoint: socket.clone(),
        endpoint_type: EndpointType::Uds as i32,
        shared: args.shared,
    };
    let outcome = match uds_channel(register.clone()).await {
        Ok(channel) => RegistrationClient::new(channel)
            .register_discovery_handler(request)
            .await
            .map(|_| ()),
        Err(e) => Err(Status::unavailable(format!("cannot connect: {e}"))),
    };
    if let Err(status) = outcome {
        emit(status_json("register-failed", &register, &status));
        std::process::exit(1);
    }
    emit(json!({"event": "registered", "name": name, "agent": register}));
    let listener = bind(&socket)?;
    emit(json!({"event": "serving", "socket": socket}));
    Server::builder()
        .add_service(DiscoveryHandlerServer::new(EchoHandler { devices: args.devices }))
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await?;
    Ok(())
}

// ---- registration mode ----------------------------------------------------------------------

struct Registrar {
    details: String,
}

async fn discover_from(request: v0::RegisterDiscoveryHandlerRequest, details: String) {
    let endpoint = request.endpoint.clone();
    let channel = if request.endpoint_type == EndpointType::Network as i32 {
        match Endpoint::from_shared(format!("http://{endpoint}")) {
            Ok(e) => e.connect().await,
            Err(e) => Err(e),
        }
    } else {
        uds_channel(endpoint.clone()).await
    };
    let channel = match channel {
        Ok(c) => c,
        Err(e) => {
            let status = Status::unavailable(format!("cannot connect: {e}"));
            emit(status_json("discover-error", &endpoint, &status));
            return;
        }
    };
    let mut client = DiscoveryHandlerClient::new(channel);
    let call = client.discover(v0::DiscoverRequest {
        discovery_details: details,
        discovery_properties: Default::default(),
    });
    let mut stream = match call.await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            emit(status_json("discover-error", &endpoint, &status));
            return;
        }
    };
    loop {
        match stream.message().await {
            Ok(Some(response)) => {
                let devices: Vec<_> = response
                    .devices
                    .iter()
                    .map(|d| json!({"id": d.id, "properties": d.properties}))
                    .collect();
                emit(json!({
                    "event": "devices",
                    "name": request.name,
                    "endpoint": endpoint,
                    "devices": devices,
                }));
            }
            Ok(None) => {
                emit(json!({"event": "discover-ended", "endpoint": endpoint}));
                return;
            }
            Err(status) => {
                emit(status_json("discover-error", &endpoint, &status));
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn register_discovery_handler(
        &self,
        request: Request<v0::RegisterDiscoveryHandlerRequest>,
    ) -> Result<Response<v0::Empty>, Status> {
        let request = request.into_inner();
        let endpoint_type = if request.endpoint_type == EndpointType::Network as i32 {
            "NETWORK"
        } else {
            "UDS"
        };
        emit(json!({
            "event": "registered",
            "name": request.name,
            "endpoint": request.endpoint,
            "endpoint_type": endpoint_type,
            "shared": request.shared,
        }));
        tokio::spawn(discover_from(request, self.details.clone()));
        Ok(Response::new(v0::Empty {}))
    }
}

async fn run_registration(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let socket = args.socket.unwrap_or_else(|| usage());
    let listener = bind(&socket)?;
    emit(json!({"event": "listening", "socket": socket}));
    let registrar = Registrar { details: args.details.unwrap_or_default() };
    Server::builder()
        .add_service(RegistrationServer::new(registrar))
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await?;
    Ok(())
}

// ---- reset mode ------------------------------------------------------------------------------

async fn reset_connection(io: UnixStream) -> Result<(), h2::Error> {
    let mut connection = h2::server::handshake(io).await?;
    while let Some(accepted) = connection.accept().await {
        let (request, mut respond) = accepted?;
        let authority = request.uri().authority().map(|a| a.to_string()).unwrap_or_default();
        emit(json!({"event": "reset", "path": request.uri().path(), "authority": authority}));
        respond.send_reset(h2::Reason::PROTOCOL_ERROR);
    }
    Ok(())
}

async fn run_reset(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let socket = args.socket.unwrap_or_else(|| usage());
    let listener = bind(&socket)?;
    emit(json!({"event": "listening", "socket": socket}));
    loop {
        let (io, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = reset_connection(io).await {
                eprintln!("akripeer: connection ended: {e}");
            }
        });
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((mode, rest)) = argv.split_first() else { usage() };
    let args = parse(rest);
    let outcome = match mode.as_str() {
        "handler" => run_handler(args).await,
        "registration" => run_registration(args).await,
        "reset" => run_reset(args).await,
        _ => usage(),
    };
    if let Err(e) = outcome {
        eprintln!("akripeer: {e}");
        std::process::exit(1);
    }
}
