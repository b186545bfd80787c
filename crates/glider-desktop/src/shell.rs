//! The dashboard's window (spec package `webviewshell`): a `tao` event loop on the
//! process's main thread (GTK wants the thread that initialised it), a window holding a
//! `wry` web view on the dashboard's address, and the tray beside it.
//!
//! The window opens when Glider says the dashboard answers ([`Notice::Ready`]), never
//! before: a web view on an address nobody listens at yet would show an error page and
//! stay on it. Closing the window hides it and Glider keeps serving (the tray's "Open
//! dashboard" shows it again) unless [`Options::exit_on_close`] asks for a stop; with no
//! tray to bring it back, closing stops Glider too, so a window is never lost while
//! Glider runs unseen. The loop ends when Glider says serving has stopped
//! ([`Notice::Stopped`]), so the tray's Exit and a SIGTERM end the same way: Glider
//! drains first, then the window goes.

use std::sync::Arc;

use tao::event::{Event, StartCause, WindowEvent};
use tao::event_loop::{ControlFlow, EventLoop, EventLoopBuilder, EventLoopProxy};
use tao::platform::run_return::EventLoopExtRunReturn;
use tao::window::{Window, WindowBuilder};
use wry::WebView;

use crate::tray::{Tray, TrayCommand};
use crate::{Actions, DesktopError, Notice, Options};

/// What the loop receives from other threads.
#[derive(Debug)]
pub(crate) enum Wake {
    Notice(Notice),
    Tray(tray_icon::menu::MenuEvent),
}

/// The GUI: made on the main thread, run there until Glider stops.
pub struct Desktop {
    event_loop: EventLoop<Wake>,
}

/// Tells the window what Glider is doing; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Notifier {
    proxy: EventLoopProxy<Wake>,
}

impl Notifier {
    /// Hand `notice` to the window's loop (dropped when the loop has ended).
    pub fn send(&self, notice: Notice) {
        let _ = self.proxy.send_event(Wake::Notice(notice));
    }
}

impl Desktop {
    /// Start the GUI toolkit. Call on the main thread, before Glider's runtime starts
    /// threads of its own.
    pub fn new() -> Result<Desktop, DesktopError> {
        // GTK aborts the process when it has no display; say so as an error instead.
        #[cfg(target_os = "linux")]
        if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
            return Err(DesktopError::Window("no display".into()));
        }
        Ok(Desktop {
            event_loop: EventLoopBuilder::<Wake>::with_user_event().build(),
        })
    }

    /// The handle Glider tells the window through.
    pub fn notifier(&self) -> Notifier {
        Notifier {
            proxy: self.event_loop.create_proxy(),
        }
    }

    /// Run until Glider says serving has stopped. Returns the first error that kept
    /// the window from showing the dashboard, if any (Glider was asked to stop then).
    pub fn run(mut self, options: Options, actions: Arc<dyn Actions>) -> Result<(), DesktopError> {
        let proxy = self.event_loop.create_proxy();
        let mut state = State {
            options,
            actions,
            window: None,
            tray: None,
            url: None,
            stopping: false,
            failure: None,
        };
        self.event_loop.run_return(|event, target, control_flow| {
            *control_flow = ControlFlow::Wait;
            match event {
                Event::NewEvents(StartCause::Init) if state.options.tray => {
                    state.tray = Tray::show(&proxy);
                }
                Event::UserEvent(Wake::Notice(Notice::Ready { url })) => {
                    state.url = Some(url);
                    state.open(target);
                }
                Event::UserEvent(Wake::Notice(Notice::Stopped { error })) => {
                    if let Some(error) = error {
                        eprintln!("glider desktop: Glider stopped: {error}");
                    }
                    state.window = None;
                    state.tray = None;
                    *control_flow = ControlFlow::Exit;
                }
                Event::UserEvent(Wake::Tray(menu_event)) => {
                    let command = state.tray.as_ref().and_then(|t| t.command(&menu_event));
                    match command {
                        Some(TrayCommand::Open) => state.open(target),
                        Some(TrayCommand::PauseLocal(paused)) => {
                            if let Err(why) = state.actions.set_local_paused(paused) {
                                eprintln!("glider desktop: {why}");
                                if let Some(tray) = &state.tray {
                                    tray.set_paused(!paused);
                                }
                            }
                        }
                        Some(TrayCommand::Exit) => state.stop(),
                        None => {}
                    }
                }
                Event::WindowEvent {
                    event: WindowEvent::CloseRequested,
                    ..
                } => {
                    if state.options.exit_on_close || state.tray.is_none() {
                        state.stop();
                    } else if let Some((window, _)) = &state.window {
                        window.set_visible(false);
                    }
                }
                _ => {}
            }
        });
        match state.failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct State {
    options: Options,
    actions: Arc<dyn Actions>,
    /// The window and its web view (dropped together).
    window: Option<(Window, WebView)>,
    tray: Option<Tray>,
    url: Option<String>,
    stopping: bool,
    failure: Option<DesktopError>,
}

impl State {
    /// Show the window, making it on first use.
    fn open(&mut self, target: &tao::event_loop::EventLoopWindowTarget<Wake>) {
        if let Some((window, _)) = &self.window {
            window.set_visible(true);
            window.set_focus();
            return;
        }
        let Some(url) = self.url.clone() else {
            return;
        };
        match make_window(target, &self.options.title, &url) {
            Ok(made) => self.window = Some(made),
            Err(e) => {
                eprintln!("glider desktop: {e}; stopping");
                self.failure = Some(e);
                self.stop();
            }
        }
    }

    /// Ask Glider to stop (once); the loop ends on its [`Notice::Stopped`].
    fn stop(&mut self) {
        if let Some((window, _)) = &self.window {
            window.set_visible(false);
        }
        if !self.stopping {
            self.stopping = true;
            self.actions.exit();
        }
    }
}

fn make_window(
    target: &tao::event_loop::EventLoopWindowTarget<Wake>,
    title: &str,
    url: &str,
) -> Result<(Window, WebView), DesktopError> {
    let window = WindowBuilder::new()
        .with_title(title)
        .with_inner_size(tao::dpi::LogicalSize::new(1280.0, 860.0))
        .build(target)
        .map_err(|e| DesktopError::Window(e.to_string()))?;
    #[cfg(target_os = "linux")]
    let webview = {
        use tao::platform::unix::WindowExtUnix;
        use webkit2gtk::{WebContextExt, WebViewExt};
        use wry::{WebViewBuilderExtUnix, WebViewExtUnix};
        let vbox = window
            .default_vbox()
            .ok_or_else(|| DesktopError::WebView("the window has no GTK box".into()))?;
        let webview = wry::WebViewBuilder::new()
            .build_gtk(vbox)
            .map_err(|e| DesktopError::WebView(e.to_string()))?;
        // WebKitGTK takes the page's language from the process locale, and under the C
        // locale (a service, a bare session) `navigator.language` is "C", which `Intl`
        // refuses ("invalid language tag: C"): the charts' library then fails to load.
        if let (Some(language), Some(context)) = (
            fallback_language(&locale_env()),
            webview.webview().context(),
        ) {
            context.set_preferred_languages(&[language]);
        }
        webview
            .load_url(url)
            .map_err(|e| DesktopError::WebView(e.to_string()))?;
        webview
    };
    #[cfg(not(target_os = "linux"))]
    let webview = wry::WebViewBuilder::new()
        .with_url(url)
        .build(&window)
        .map_err(|e| DesktopError::WebView(e.to_string()))?;
    Ok((window, webview))
}

/// The locale that decides messages: `LC_ALL`, else `LC_MESSAGES`, else `LANG`.
#[cfg(target_os = "linux")]
fn locale_env() -> Option<String> {
    ["LC_ALL", "LC_MESSAGES", "LANG"]
        .iter()
        .find_map(|key| std::env::var(key).ok().filter(|v| !v.is_empty()))
}

/// The language to give the web view when the locale names none (`C`, `POSIX`,
/// `C.UTF-8`, unset): `en-US`; `None` leaves WebKit's own choice.
#[cfg(target_os = "linux")]
fn fallback_language(locale: &Option<String>) -> Option<&'static str> {
    match locale.as_deref() {
        None => Some("en-US"),
        Some(l) if l == "C" || l == "POSIX" || l.starts_with("C.") => Some("en-US"),
        Some(_) => None,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::fallback_language;

    #[test]
    fn only_a_locale_without_a_language_gets_the_fallback() {
        for none in [None, Some("C"), Some("POSIX"), Some("C.UTF-8")] {
            assert_eq!(
                fallback_language(&none.map(str::to_owned)),
                Some("en-US"),
                "{none:?}"
            );
        }
        assert_eq!(fallback_language(&Some("de_DE.UTF-8".to_owned())), None);
    }
}
