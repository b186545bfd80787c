//! Glider's dashboard in a window of the operating system, with a tray icon: the
//! spec's `webviewshell` is the module `shell`, its `tray` the module `tray`.
//!
//! The window is a web view (`wry`; WebKitGTK on Linux, WebView2 on Windows, WKWebView
//! on macOS) on a `tao` window, pointed at the dashboard's own address: the page is the
//! same page a browser gets, served by the same door, so the same rules hold — a
//! loopback `Host`, the page's own `Origin` on state changes and `/ws`, and the token
//! cookie set by `/?token=` when a token is configured. Nothing here talks to the
//! engine: what the window and the tray may do to Glider (pause local routing, stop
//! it) is asked of the caller through [`Actions`], and Glider tells the window when the
//! dashboard is up and when serving has ended through a [`Notifier`].
//!
//! The GUI libraries need GTK and WebKitGTK on Linux, so they are behind this crate's
//! `gui` feature (the `glider` binary's `desktop` feature turns it on): without it the
//! crate builds with no system libraries and [`Desktop::new`] says how to get a build
//! that has the window.

#[cfg(feature = "gui")]
pub mod shell;
#[cfg(feature = "gui")]
pub mod tray;

/// What the window and the tray ask of Glider. Called on the GUI thread: implementations
/// hand the work to Glider's own runtime and return at once.
pub trait Actions: Send + Sync + 'static {
    /// Pause (`true`) or resume (`false`) routing to local backends. The error says
    /// why it could not be done; the tray shows it and keeps the previous state.
    fn set_local_paused(&self, paused: bool) -> Result<(), String>;
    /// Stop Glider as SIGTERM does: drain open requests, take back redirect rules.
    /// Serving ends later; [`Notifier::stopped`] then closes the window.
    fn exit(&self);
}

/// What to open and how the window behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Window title.
    pub title: String,
    /// Closing the window stops Glider (as the tray's Exit does) instead of hiding it.
    pub exit_on_close: bool,
    /// Show the tray icon (a missing tray host is reported, and the window still runs).
    pub tray: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            title: "Glider".into(),
            exit_on_close: false,
            tray: true,
        }
    }
}

/// Why the window could not run.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error(
        "this glider was built without the window: rebuild with `cargo build -p glider --features desktop` (needs GTK 3 and WebKitGTK 4.1: see docs/desktop.md)"
    )]
    NotBuilt,
    #[error("cannot open a window: {0} (is DISPLAY or WAYLAND_DISPLAY set?)")]
    Window(String),
    #[error("cannot show the dashboard in the window: {0}")]
    WebView(String),
}

/// What Glider tells the window, from any thread.
#[derive(Debug)]
pub enum Notice {
    /// The dashboard answers at `url` (with `?token=` when it needs one): open it.
    Ready { url: String },
    /// Serving ended (`error`: why, when it failed): close the window, end the loop.
    Stopped { error: Option<String> },
}

#[cfg(feature = "gui")]
pub use shell::{Desktop, Notifier};

#[cfg(not(feature = "gui"))]
mod absent {
    use super::{Actions, DesktopError, Notice, Options};

    /// Without the `gui` feature: no window can be made.
    pub struct Desktop(());

    /// Without the `gui` feature: notices go nowhere.
    #[derive(Clone)]
    pub struct Notifier(());

    impl Desktop {
        /// Always [`DesktopError::NotBuilt`].
        pub fn new() -> Result<Desktop, DesktopError> {
            Err(DesktopError::NotBuilt)
        }
        pub fn notifier(&self) -> Notifier {
            Notifier(())
        }
        pub fn run(
            self,
            _options: Options,
            _actions: std::sync::Arc<dyn Actions>,
        ) -> Result<(), DesktopError> {
            Err(DesktopError::NotBuilt)
        }
    }

    impl Notifier {
        pub fn send(&self, _notice: Notice) {}
    }
}

#[cfg(not(feature = "gui"))]
pub use absent::{Desktop, Notifier};
