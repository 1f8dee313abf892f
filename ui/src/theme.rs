//! The console's colours, in one place.

use ratatui::style::{Color, Modifier, Style};

/// Escapes of characters an agent sent that cannot be shown as themselves: loud, so that they
/// never pass for literal text.
pub fn escape() -> Style {
    Style::new().fg(Color::Black).bg(Color::LightMagenta)
}

pub fn label() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

pub fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn title() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn tool() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

/// Text that came from outside text the session read (fetched pages, http replies): the
/// section heading and the gutter mark on the lines that hold it.
pub fn outside() -> Style {
    Style::new()
        .fg(Color::LightYellow)
        .add_modifier(Modifier::BOLD)
}

pub fn added() -> Style {
    Style::new().fg(Color::Green)
}

pub fn removed() -> Style {
    Style::new().fg(Color::Red)
}

pub fn hunk() -> Style {
    Style::new().fg(Color::Cyan)
}

pub fn key() -> Style {
    Style::new()
        .fg(Color::Black)
        .bg(Color::White)
        .add_modifier(Modifier::BOLD)
}

pub fn allow() -> Style {
    Style::new().fg(Color::Green)
}

pub fn deny() -> Style {
    Style::new().fg(Color::Red)
}

pub fn warn() -> Style {
    Style::new().fg(Color::Yellow)
}

pub fn error() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

pub fn ok() -> Style {
    Style::new().fg(Color::Green)
}

pub fn focus_border() -> Style {
    Style::new().fg(Color::Yellow)
}
