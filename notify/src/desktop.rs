//! Desktop notifications over the user's session bus (the freedesktop Desktop Notifications
//! spec: `org.freedesktop.Notifications` at `/org/freedesktop/Notifications`).
//!
//! The notifier calls `Notify` for a waiting card, `CloseNotification` when the card no longer
//! needs it, and listens for `ActionInvoked` to run the configured "open" command. The signal
//! stream is the proxy's: its match rule names the notification service as the sender, so the
//! bus delivers only the notification server's own signals, not another client's forgeries.

use std::collections::HashMap;
use zbus::zvariant::Value;

/// The action a notification offers (`open`), and the spec's `default` (a click on the body).
pub const ACTION_OPEN: &str = "open";
pub const ACTION_DEFAULT: &str = "default";

#[zbus::proxy(
    interface = "org.freedesktop.Notifications",
    default_service = "org.freedesktop.Notifications",
    default_path = "/org/freedesktop/Notifications"
)]
pub trait Notifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        app_name: &str,
        replaces_id: u32,
        app_icon: &str,
        summary: &str,
        body: &str,
        actions: &[&str],
        hints: HashMap<&str, Value<'_>>,
        expire_timeout: i32,
    ) -> zbus::Result<u32>;

    fn close_notification(&self, id: u32) -> zbus::Result<()>;

    fn get_server_information(&self) -> zbus::Result<(String, String, String, String)>;

    #[zbus(signal)]
    fn action_invoked(&self, id: u32, action_key: String) -> zbus::Result<()>;
}

#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error("cannot reach the session bus: {0}. Run `gatehouse notify` inside your desktop session (where DBUS_SESSION_BUS_ADDRESS is set), or set `[notify] desktop = false` and use only the hook")]
    Bus(zbus::Error),
    #[error("no notification server answers on the session bus: {0}. Start your desktop's notification daemon, or set `[notify] desktop = false` and use only the hook")]
    NoServer(zbus::Error),
}

/// The session bus and the notification server on it.
pub struct Desktop {
    pub proxy: NotificationsProxyBlocking<'static>,
    /// The server's name and vendor, as it says (for the notifier's first report line).
    pub server: String,
}

impl Desktop {
    /// Connects to the session bus and checks a notification server answers.
    pub fn connect() -> Result<Desktop, DesktopError> {
        let conn = zbus::blocking::Connection::session().map_err(DesktopError::Bus)?;
        let proxy = NotificationsProxyBlocking::new(&conn).map_err(DesktopError::Bus)?;
        let (name, vendor, version, _spec) = proxy
            .get_server_information()
            .map_err(DesktopError::NoServer)?;
        Ok(Desktop {
            proxy,
            server: format!("{name} {version} ({vendor})"),
        })
    }

    /// Shows one card; the notification's id.
    pub fn show(&self, title: &str, body: &str) -> zbus::Result<u32> {
        let mut hints = HashMap::new();
        // Normal urgency: shown, queued by the server like any message.
        hints.insert("urgency", Value::U8(1));
        hints.insert("category", Value::from("im.received"));
        self.proxy.notify(
            "gatehouse",
            0,
            "dialog-question",
            title,
            body,
            &[
                ACTION_DEFAULT,
                "Open the console",
                ACTION_OPEN,
                "Open the console",
            ],
            hints,
            // Never expires on its own: the broker says when the card is settled.
            0,
        )
    }

    pub fn close(&self, id: u32) -> zbus::Result<()> {
        self.proxy.close_notification(id)
    }
}
