//! A real S3-compatible server for the tests: `s3s-fs` (an S3 implementation in Rust on a
//! directory) with SigV4 authentication, on a free port, in its own thread and runtime so
//! that it serves sync and async tests and worker processes alike. It can be stopped and
//! started again on the same port (the store going away and coming back).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

/// Access key of the server (not a secret anywhere but here).
pub const ACCESS_KEY: &str = "agentfleet-test-access";
/// Secret key of the server: tests grep for it in what the system says.
pub const SECRET_KEY: &str = "agentfleet-test-secret-3f9c2d7e5b";

/// A running S3-compatible server with one bucket.
pub struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    bucket: String,
    running: Mutex<Option<Serving>>,
}

struct Serving {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

impl S3Server {
    /// Starts a server with the bucket `bucket`, its objects under a fresh directory.
    pub fn start(bucket: &str) -> Result<Self, String> {
        let port = super::free_port()?;
        let root =
            std::env::temp_dir().join(format!("agentfleet-s3-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(bucket)).map_err(|e| e.to_string())?;
        let this = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            root,
            bucket: bucket.to_string(),
            running: Mutex::new(None),
        };
        this.resume()?;
        Ok(this)
    }

    /// The endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The archive URL of `prefix` in the bucket: `s3://BUCKET/PREFIX`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{}", self.bucket, prefix.trim_matches('/'))
    }

    /// Where the server keeps the bucket's objects (to corrupt one, say).
    pub fn bucket_dir(&self) -> PathBuf {
        self.root.join(&self.bucket)
    }

    /// The environment a client needs: endpoint, plain HTTP, credentials, region.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Stops serving (connections are refused) until [`Self::resume`].
    pub fn stop(&self) {
        let serving = self.running.lock().map(|mut r| r.take()).ok().flatten();
        if let Some(s) = serving {
            let _ = s.stop.send(true);
            let _ = s.thread.join();
        }
    }

    /// Serves again, on the same port.
    pub fn resume(&self) -> Result<(), String> {
        let mut running = self.running.lock().map_err(|e| e.to_string())?;
        if running.is_some() {
            return Ok(());
        }
        let fs = s3s_fs::FileSystem::new(&self.root).map_err(|e| format!("{e:?}"))?;
        let service = {
            let mut b = s3s::service::S3ServiceBuilder::new(fs);
            b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
            b.build()
        };
        let std_listener = bind_again(self.addr)?;
        let (stop, mut stopped) = watch::channel(false);
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                    return;
                };
                loop {
                    let socket = tokio::select! {
                        r = listener.accept() => match r {
                            Ok((socket, _)) => socket,
                            Err(_) => continue,
                        },
                        _ = stopped.wait_for(|v| *v) => break,
                    };
                    let service = service.clone();
                    let mut stop = stopped.clone();
                    tokio::spawn(async move {
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(socket), service);
                        tokio::select! {
                            _ = conn => {}
                            _ = stop.wait_for(|v| *v) => {}
                        }
                    });
                }
            });
        });
        *running = Some(Serving { stop, thread });
        Ok(())
    }
}

/// A listener on `addr`, retried for a moment while the old one lets go.
fn bind_again(addr: SocketAddr) -> Result<std::net::TcpListener, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => {
                l.set_nonblocking(true).map_err(|e| e.to_string())?;
                return Ok(l);
            }
            Err(e) if std::time::Instant::now() > deadline => {
                return Err(format!("binding {addr}: {e}"))
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
