//! The tray icon and its menu (spec package `tray`): Open dashboard, Pause local
//! routing (a check item), Exit. The spec names it for Windows; `tray-icon` gives the
//! same menu on Linux (an AppIndicator / StatusNotifier item, which needs a tray host
//! on the desktop) and macOS (the menu bar).
//!
//! Menu clicks arrive on tray-icon's own handler, from whatever thread the toolkit uses;
//! they are forwarded into the window's event loop, which decides what a click means
//! ([`Tray::command`]) on its own thread. A desktop with no tray host is not an error
//! for Glider: the icon is left out, the cause printed, and the window then stops
//! Glider when closed (see [`crate::shell`]).

use tao::event_loop::EventLoopProxy;
use tray_icon::menu::{CheckMenuItem, Menu, MenuEvent, MenuItem, PredefinedMenuItem};
use tray_icon::{Icon, TrayIcon, TrayIconBuilder};

use crate::shell::Wake;

/// What a menu click asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrayCommand {
    /// Show (or make) the dashboard's window.
    Open,
    /// Pause (`true`) or resume local routing: the check item's new state.
    PauseLocal(bool),
    /// Stop Glider (drain, then end).
    Exit,
}

/// The icon and the menu items a click is matched against.
pub struct Tray {
    _icon: TrayIcon,
    open: MenuItem,
    pause: CheckMenuItem,
    exit: MenuItem,
}

impl Tray {
    /// Put the icon in the tray, or say why not and return `None`.
    pub(crate) fn show(proxy: &EventLoopProxy<Wake>) -> Option<Tray> {
        match Tray::build() {
            Ok(tray) => {
                let proxy = proxy.clone();
                MenuEvent::set_event_handler(Some(move |event: MenuEvent| {
                    let _ = proxy.send_event(Wake::Tray(event));
                }));
                Some(tray)
            }
            Err(why) => {
                eprintln!("glider desktop: no tray icon ({why}); closing the window stops Glider");
                None
            }
        }
    }

    fn build() -> Result<Tray, String> {
        let open = MenuItem::new("Open dashboard", true, None);
        let pause = CheckMenuItem::new("Pause local routing", true, false, None);
        let exit = MenuItem::new("Exit", true, None);
        let menu = Menu::new();
        menu.append_items(&[&open, &pause, &PredefinedMenuItem::separator(), &exit])
            .map_err(|e| e.to_string())?;
        let icon = TrayIconBuilder::new()
            .with_tooltip("Glider")
            .with_icon(icon()?)
            .with_menu(Box::new(menu))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Tray {
            _icon: icon,
            open,
            pause,
            exit,
        })
    }

    /// What `event` (a click on one of this tray's items) asks for.
    pub fn command(&self, event: &MenuEvent) -> Option<TrayCommand> {
        let id = event.id();
        if id == self.open.id() {
            Some(TrayCommand::Open)
        } else if id == self.pause.id() {
            Some(TrayCommand::PauseLocal(self.pause.is_checked()))
        } else if id == self.exit.id() {
            Some(TrayCommand::Exit)
        } else {
            None
        }
    }

    /// Show local routing as paused or not (after a pause that failed).
    pub fn set_paused(&self, paused: bool) {
        self.pause.set_checked(paused);
    }
}

/// Glider's mark, drawn: a blue disc with a white ring (no image decoder needed).
fn icon() -> Result<Icon, String> {
    const SIZE: u32 = 32;
    let mut rgba = Vec::with_capacity((SIZE * SIZE * 4) as usize);
    let centre = (SIZE as f32 - 1.0) / 2.0;
    for y in 0..SIZE {
        for x in 0..SIZE {
            let d = ((x as f32 - centre).powi(2) + (y as f32 - centre).powi(2)).sqrt();
            let pixel = if d > 15.5 {
                [0, 0, 0, 0]
            } else if (8.0..11.0).contains(&d) {
                [255, 255, 255, 255]
            } else {
                [0x2f, 0x6f, 0xde, 255]
            };
            rgba.extend_from_slice(&pixel);
        }
    }
    Icon::from_rgba(rgba, SIZE, SIZE).map_err(|e| e.to_string())
}
