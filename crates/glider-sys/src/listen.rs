//! How every HTTP door serves its connections (spec: issue 22, items 5 and 9): the
//! accept loop, one hyper connection per socket (HTTP/1.1 and HTTP/2, upgrades kept),
//! the client-side timeouts ([`Limits`]: a request head, a request body, an idle
//! keep-alive connection) and the drain at shutdown ([`Drain`]: stop accepting, let
//! open replies finish until a deadline, then end the streams still open through their
//! [`Cutoff`] and close what is left).
//!
//! The timeouts never touch a reply in progress: a connection only counts as waiting
//! while no request is in flight on it, so a long SSE reply or a model that takes
//! minutes to answer keeps its connection, and an upgraded one (WebSocket, CONNECT)
//! leaves this loop once it is handed over.
//!
//! One file past 600 lines on purpose: the timeouts and the drain watch the same
//! connections (whether a request is in flight on each), so the two are written against
//! one accounting.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a client may keep a connection waiting on it (the `server.*_timeout_secs`
/// keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From a new connection, or the first byte of a later request, to its complete head.
    pub header_read: Duration,
    /// From a request's head to the end of its body (for doors that read bodies whole).
    pub body_read: Duration,
    /// A keep-alive connection with no request in flight and no byte sent is closed.
    pub idle: Duration,
}

impl Limits {
    /// The limits from their settings, in seconds.
    pub fn from_secs(header_read: u64, body_read: u64, idle: u64) -> Limits {
        Limits {
            header_read: Duration::from_secs(header_read),
            body_read: Duration::from_secs(body_read),
            idle: Duration::from_secs(idle),
        }
    }
}

/// After the drain deadline, how long the streams just ended get to flush their error
/// event before their connections are closed anyway.
pub const CUT_FLUSH: Duration = Duration::from_secs(2);

/// Where a shutdown is; each phase includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    /// Stop accepting; finish what is open, take no new request on open connections.
    Draining,
    /// The deadline passed: replies still streaming end with an error event.
    Cut,
    /// Close every connection still open.
    Abandon,
}

/// The shutdown every door of a process shares; cheap to clone.
#[derive(Clone)]
pub struct Drain {
    phase: watch::Receiver<Phase>,
    open: Arc<OpenConnections>,
}

#[derive(Default)]
struct OpenConnections {
    count: AtomicUsize,
    closed: tokio::sync::Notify,
}

/// Counts one connection as open until dropped.
struct OpenGuard(Arc<OpenConnections>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

impl Drain {
    /// A drain that starts when `stop` resolves and cuts open streams `grace` later.
    /// Call inside a tokio runtime.
    pub fn on(stop: impl Future<Output = ()> + Send + 'static, grace: Duration) -> Drain {
        let (phase_tx, phase) = watch::channel(Phase::Serving);
        tokio::spawn(async move {
            stop.await;
            phase_tx.send_replace(Phase::Draining);
            tokio::time::sleep(grace).await;
            phase_tx.send_replace(Phase::Cut);
            tokio::time::sleep(CUT_FLUSH).await;
            phase_tx.send_replace(Phase::Abandon);
        });
        Drain {
            phase,
            open: Arc::default(),
        }
    }

    /// Resolves when `phase` is reached.
    fn reached(&self, phase: Phase) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.phase.clone();
        async move {
            // A dropped sender means the drain task is gone with its runtime: stop too.
            let _ = rx.wait_for(|now| *now >= phase).await;
        }
    }

    /// Resolves when the stop fired (listeners close then).
    pub fn draining(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(Phase::Draining)
    }

    /// What a handler keeps to end its reply at the deadline.
    pub fn cutoff(&self) -> Cutoff {
        Cutoff(self.phase.clone())
    }

    fn track(&self) -> OpenGuard {
        self.open.count.fetch_add(1, Ordering::AcqRel);
        OpenGuard(self.open.clone())
    }

    /// Resolves once no connection served under this drain is open.
    pub async fn connections_closed(&self) {
        loop {
            let closed = self.open.closed.notified();
            if self.open.count.load(Ordering::Acquire) == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// The drain deadline as a reply sees it: [`serve_connection`] puts one in every
/// request's extensions.
#[derive(Clone)]
pub struct Cutoff(watch::Receiver<Phase>);

impl Cutoff {
    /// Resolves when the drain deadline passed.
    pub fn reached(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|now| *now >= Phase::Cut).await;
        }
    }

    /// `body` as it is until the deadline; then `last` (the dialect's error event) is
    /// sent and the body ends.
    pub fn end_stream<B>(&self, body: B, last: Bytes) -> CutBody<B> {
        CutBody {
            inner: body,
            cut: Some(Box::pin(self.reached())),
            last: Some(last),
        }
    }
}

/// A reply body that ends with a last chunk at the drain deadline ([`Cutoff::end_stream`]).
pub struct CutBody<B> {
    inner: B,
    cut: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    last: Option<Bytes>,
}

impl<B> Body for CutBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if let Some(cut) = &mut this.cut
            && cut.as_mut().poll(cx).is_ready()
        {
            this.cut = None;
            return Poll::Ready(this.last.take().map(|last| Ok(Frame::data(last))));
        }
        if this.cut.is_none() {
            // Cut already: the last chunk went out.
            return Poll::Ready(None);
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none() && self.last.is_none() || self.inner.is_end_stream()
    }
}

/// Accept connections on `listener` and serve each with `service` under `limits`
/// until the drain starts; then wait until every connection of `drain` is closed
/// (at the latest [`CUT_FLUSH`] after its deadline).
///
/// Accepted sockets get `TCP_NODELAY`: a streamed reply is written as many small
/// chunks, and with Nagle's algorithm each chunk after the first waits for the
/// client's (delayed) ACK — about 40 ms per reply on Linux.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    drain: Drain,
) -> std::io::Result<()>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut draining = std::pin::pin!(drain.draining());
    loop {
        tokio::select! {
            _ = &mut draining => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
                    }
                    tokio::spawn(serve_connection(tcp, service.clone(), limits, drain.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: say so, pause, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    drain.connections_closed().await;
    Ok(())
}

/// Serve one connection (a socket, or a decrypted stream inside a tunnel) with
/// `service` under `limits`: every request carries the drain's [`Cutoff`]; the
/// connection closes when its client leaves it waiting past a limit, takes no new
/// request once the drain starts, and is closed when the drain gives up on it.
pub async fn serve_connection<IO, S, B>(io: IO, service: S, limits: Limits, drain: Drain)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    let _open = drain.track();
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io,
        activity: activity.clone(),
    });
    let service = Counted {
        inner: service,
        activity: activity.clone(),
        cutoff: drain.cutoff(),
    };
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(io, service);
    let mut connection = std::pin::pin!(connection);
    let mut phase = drain.phase.clone();
    let mut shutting_down = false;
    loop {
        if !shutting_down && *phase.borrow_and_update() >= Phase::Draining {
            connection.as_mut().graceful_shutdown();
            shutting_down = true;
        }
        if *phase.borrow() >= Phase::Abandon {
            tracing::debug!("connection closed at the end of the drain");
            return;
        }
        let check_at = activity.check_at(&limits);
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = tokio::time::sleep_until(check_at) => {
                if let Some(why) = activity.expired(&limits) {
                    tracing::debug!("connection closed: {why}");
                    return;
                }
            }
            changed = phase.changed() => {
                if changed.is_err() {
                    // The drain's task is gone with its runtime.
                    return;
                }
            }
        }
    }
}

/// What a connection did last, for its timeouts (milliseconds since `base`).
struct Activity {
    base: Instant,
    /// Requests whose reply has not ended yet.
    in_flight: AtomicUsize,
    /// Whether a request was ever served here (idle applies only after one).
    served: AtomicBool,
    /// When the connection opened or its last reply ended.
    settled_ms: AtomicU64,
    /// When the first byte after `settled_ms` arrived (the next request's head begins).
    head_started_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            settled_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// Bytes arrived from the client.
    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_started_ms.load(Ordering::Acquire)
                <= self.settled_ms.load(Ordering::Acquire)
        {
            // +1: a byte in the same millisecond as the settle still counts as after it.
            self.head_started_ms
                .store(self.now_ms() + 1, Ordering::Release);
        }
    }

    fn request_started(&self) {
        self.served.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    fn reply_ended(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.settled_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    /// The limit the connection is under now, and when it runs out; `None` while a
    /// request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, &'static str)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let settled = self.settled_ms.load(Ordering::Acquire);
        let head_started = self.head_started_ms.load(Ordering::Acquire);
        Some(if head_started > settled {
            (
                self.at(head_started) + limits.header_read,
                "the request head did not arrive in full within server.header_read_timeout_secs",
            )
        } else if !self.served.load(Ordering::Acquire) {
            (
                self.at(settled) + limits.header_read,
                "no request within server.header_read_timeout_secs of connecting",
            )
        } else {
            (
                self.at(settled) + limits.idle,
                "idle keep-alive connection (server.idle_timeout_secs)",
            )
        })
    }

    /// When to look again: the current deadline, or (a request in flight) one limit on.
    fn check_at(&self, limits: &Limits) -> Instant {
        match self.deadline(limits) {
            Some((at, _)) => at,
            None => Instant::now() + limits.header_read.min(limits.idle),
        }
    }

    /// Why the connection should close now, if it should.
    fn expired(&self, limits: &Limits) -> Option<&'static str> {
        self.deadline(limits)
            .filter(|(at, _)| *at <= Instant::now())
            .map(|(_, why)| why)
    }
}

/// The connection's stream, noting when the client sends.
struct Watched<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The door's service, counting requests in flight until their reply body ends and
/// handing each request the drain's [`Cutoff`].
struct Counted<S> {
    inner: S,
    activity: Arc<Activity>,
    cutoff: Cutoff,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Counted<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<InFlight<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.cutoff.clone());
        self.activity.request_started();
        let guard = ReplyGuard(self.activity.clone());
        let reply = self.inner.call(request);
        Box::pin(async move {
            let response = reply.await?;
            Ok(response.map(|body| InFlight {
                inner: body,
                _guard: guard,
            }))
        })
    }
}

/// Marks a request's reply as ended when dropped (after its body, or with a failed
/// handler).
struct ReplyGuard(Arc<Activity>);

impl Drop for ReplyGuard {
    fn drop(&mut self) {
        self.0.reply_ended();
    }
}

/// A reply body that keeps its request counted as in flight.
pub struct InFlight<B> {
    inner: B,
    _guard: ReplyGuard,
}

impl<B: Body + Unpin> Body for InFlight<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The error a request body gives when it did not arrive within its deadline.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimedOut {
    pub after: Duration,
}

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive in full within {} s (server.body_read_timeout_secs)",
            self.after.as_secs()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

/// A request body that fails with [`BodyTimedOut`] when it has not ended `limit` after
/// it was made (the request's head arrived then), however slowly bytes trickle in.
pub struct DeadlineBody<B> {
    inner: B,
    limit: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl<B> DeadlineBody<B> {
    /// `body` with `limit` to arrive in full.
    pub fn new(body: B, limit: Duration) -> DeadlineBody<B> {
        DeadlineBody {
            inner: body,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
            timed_out: Arc::default(),
        }
    }

    /// Tells afterwards whether the deadline failed this body (the reply is then 408).
    pub fn timed_out_flag(&self) -> Arc<AtomicBool> {
        self.timed_out.clone()
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.timed_out.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut { after: this.limit }))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use http_body_util::{BodyExt, StreamBody};

    /// A body that sends `first`, then waits forever (a client or backend that stalls).
    fn stalls_after(first: &'static [u8]) -> impl Body<Data = Bytes, Error = BoxError> + Unpin {
        StreamBody::new(
            futures_util::stream::iter([Ok::<_, BoxError>(Frame::data(Bytes::from_static(first)))])
                .chain(futures_util::stream::pending()),
        )
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_at_its_deadline_and_says_which_setting() {
        let body = DeadlineBody::new(stalls_after(b"{\"par"), Duration::from_millis(50));
        let flag = body.timed_out_flag();
        let error = body.collect().await.expect_err("stalled body fails");
        assert!(flag.load(Ordering::Acquire));
        assert!(
            error.to_string().contains("server.body_read_timeout_secs"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_cut_stream_ends_with_its_last_chunk() {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let drain = Drain::on(
            async move {
                let _ = stop_rx.await;
            },
            Duration::ZERO,
        );
        let mut cut = drain.cutoff().end_stream(
            stalls_after(b"data: 1\n\n"),
            Bytes::from_static(b"event: error\n\n"),
        );
        let first = cut.frame().await.expect("frame").expect("ok");
        assert_eq!(
            first.into_data().ok(),
            Some(Bytes::from_static(b"data: 1\n\n"))
        );
        let _ = stop_tx.send(());
        let last = cut.frame().await.expect("frame").expect("ok");
        assert_eq!(
            last.into_data().ok(),
            Some(Bytes::from_static(b"event: error\n\n"))
        );
        assert!(cut.frame().await.is_none(), "the stream ends after the cut");
    }
}
