//! The held-tools pane: every tool of every third-party MCP server of the policy in force, with
//! its state against the definition the human approved, and for the selected tool its
//! definition as the server gives it now and, when it changed, a line diff against the approved
//! one.
//!
//! Everything here is the server's text: names aside (the broker checked them), descriptions,
//! titles, schemas and annotations reach the screen only as inert runs, line by line. The
//! annotations (`readOnlyHint`, ...) are labelled as the server's claim: the policy never reads
//! them. The diff is computed on the raw text and made inert per line, so an escape in the new
//! description shows as `\x1b` on its `+` line.

use crate::state::{Tone, ARM_DELAY};
use crate::theme;
use crate::wrap::{inert_runs, wrap, CONTINUATION};
use ipc_schema::servers::{JsonText, ServerName, ServerToolName, ToolDef};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::ServerToolView;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use std::time::Instant;

/// The label the annotations carry wherever they are shown.
pub const ANNOTATIONS_LABEL: &str = "annotations (the server's claim; the policy never reads it):";

/// A tool's state against its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolState {
    /// Pinned as listed: offered to sessions.
    Pinned,
    /// Never approved: held.
    New,
    /// Described otherwise than approved: held; which parts differ.
    Changed(Vec<&'static str>),
}

impl ToolState {
    pub fn of(v: &ServerToolView) -> ToolState {
        match (&v.held, &v.pinned) {
            (None, _) => ToolState::Pinned,
            (Some(_), None) => ToolState::New,
            (Some(_), Some(old)) => ToolState::Changed(changed_parts(old, &v.def)),
        }
    }

    pub fn is_held(&self) -> bool {
        *self != ToolState::Pinned
    }

    /// `pinned`, `held: new`, `held: changed (description, input schema)`.
    pub fn label(&self) -> String {
        match self {
            ToolState::Pinned => "pinned".into(),
            ToolState::New => "held: new".into(),
            ToolState::Changed(parts) if parts.is_empty() => "held: changed".into(),
            ToolState::Changed(parts) => format!("held: changed ({})", parts.join(", ")),
        }
    }

    pub fn style(&self) -> Style {
        match self {
            ToolState::Pinned => theme::ok(),
            ToolState::New => theme::warn(),
            ToolState::Changed(_) => theme::error(),
        }
    }
}

/// The parts of a definition that differ between `old` and `new`, in the order shown.
pub fn changed_parts(old: &ToolDef, new: &ToolDef) -> Vec<&'static str> {
    let mut out = Vec::new();
    if old.name != new.name {
        out.push("name");
    }
    if old.title != new.title {
        out.push("title");
    }
    if old.description != new.description {
        out.push("description");
    }
    if old.input_schema != new.input_schema {
        out.push("input schema");
    }
    if old.output_schema != new.output_schema {
        out.push("output schema");
    }
    if old.annotations != new.annotations {
        out.push("annotations");
    }
    out
}

fn pretty(j: &JsonText) -> String {
    serde_json::to_string_pretty(&j.value()).unwrap_or_else(|_| j.as_str().to_string())
}

fn indented(out: &mut String, text: &str) {
    for line in text.split('\n') {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
}

/// A definition as lines of raw text (the server's, not yet inert): what the detail shows and
/// what the diff compares. Schemas and annotations pretty-printed, one part under each heading.
pub fn definition_text(d: &ToolDef) -> String {
    let mut out = format!("name: {}\n", d.name);
    if let Some(t) = &d.title {
        out.push_str("title:\n");
        indented(&mut out, t);
    }
    match &d.description {
        Some(t) => {
            out.push_str("description:\n");
            indented(&mut out, t);
        }
        None => out.push_str("description: (none)\n"),
    }
    out.push_str("input schema:\n");
    indented(&mut out, &pretty(&d.input_schema));
    if let Some(s) = &d.output_schema {
        out.push_str("output schema:\n");
        indented(&mut out, &pretty(s));
    }
    if let Some(a) = &d.annotations {
        out.push_str(ANNOTATIONS_LABEL);
        out.push('\n');
        indented(&mut out, &pretty(a));
    }
    out
}

/// One line of a diff between two definitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffLine {
    Same(String),
    /// Only in the approved definition.
    Removed(String),
    /// Only in what the server gives now.
    Added(String),
    /// Unchanged lines left out.
    Gap,
}

/// How many unchanged lines the diff keeps around each change.
pub const DIFF_CONTEXT: usize = 3;

/// The line diff from the approved definition `old` to `new`: each change with
/// [`DIFF_CONTEXT`] lines around it, [`DiffLine::Gap`] where unchanged lines are left out.
pub fn definition_diff(old: &ToolDef, new: &ToolDef) -> Vec<DiffLine> {
    let (a, b) = (definition_text(old), definition_text(new));
    let diff = similar::TextDiff::from_lines(&a, &b);
    let old_lines = a.lines().count();
    let mut out = Vec::new();
    let groups = diff.grouped_ops(DIFF_CONTEXT);
    for (gi, group) in groups.iter().enumerate() {
        let (first, last) = (group.first(), group.last());
        if gi > 0 || first.is_some_and(|o| o.old_range().start > 0) {
            out.push(DiffLine::Gap);
        }
        for op in group {
            for c in diff.iter_changes(op) {
                let text = c
                    .value()
                    .strip_suffix('\n')
                    .unwrap_or(c.value())
                    .to_string();
                out.push(match c.tag() {
                    similar::ChangeTag::Equal => DiffLine::Same(text),
                    similar::ChangeTag::Delete => DiffLine::Removed(text),
                    similar::ChangeTag::Insert => DiffLine::Added(text),
                });
            }
        }
        if gi + 1 == groups.len() && last.is_some_and(|o| o.old_range().end < old_lines) {
            out.push(DiffLine::Gap);
        }
    }
    out
}

fn raw_line(
    out: &mut Vec<Line<'static>>,
    text: &str,
    gutter: Span<'static>,
    style: Style,
    w: usize,
) {
    let runs = inert_runs(text, style, theme::escape());
    let cont = vec![
        gutter.clone(),
        Span::styled(format!("{CONTINUATION} "), theme::dim()),
    ];
    out.extend(wrap(&runs, w, vec![gutter], cont));
}

fn heading(out: &mut Vec<Line<'static>>, text: &str, style: Style, w: usize) {
    out.extend(wrap(
        &inert_runs(text, style, theme::escape()),
        w,
        Vec::new(),
        vec![Span::styled(format!("{CONTINUATION} "), theme::dim())],
    ));
}

/// The detail of one tool for a pane `width` columns wide: what it is, its state, the digest an
/// approval is bound to, for a changed tool the diff from the approved definition (what the
/// human must judge, so first), then its whole definition as the server gives it now. Every text
/// of the server's is inert and wrapped, never cut.
pub fn detail(
    profile: &ProfileName,
    server: &ServerName,
    v: &ServerToolView,
    width: u16,
) -> Vec<Line<'static>> {
    let w = width as usize;
    let state = ToolState::of(v);
    let mut out = Vec::new();
    heading(
        &mut out,
        &format!(
            "{}  (server {server}, profile {profile})",
            ipc_schema::servers::offered_name(server, &v.def.name)
        ),
        theme::tool(),
        w,
    );
    heading(&mut out, &state.label(), state.style(), w);
    if let Some(why) = &v.held {
        heading(
            &mut out,
            &format!("broker: {why}; not offered, its calls refused until you approve it"),
            Style::new(),
            w,
        );
    }
    heading(
        &mut out,
        &format!(
            "digest {} (an approval is bound to exactly this definition)",
            hex::encode(&v.digest[..8])
        ),
        theme::dim(),
        w,
    );
    if let Some(old) = &v.pinned {
        if old != &v.def {
            out.push(Line::from(""));
            heading(
                &mut out,
                "Changes since you approved it (- approved, + now):",
                theme::label(),
                w,
            );
            for d in definition_diff(old, &v.def) {
                let (gutter, style) = match &d {
                    DiffLine::Same(_) | DiffLine::Gap => (Span::raw("  "), Style::new()),
                    DiffLine::Removed(_) => {
                        (Span::styled("- ", theme::removed()), theme::removed())
                    }
                    DiffLine::Added(_) => (Span::styled("+ ", theme::added()), theme::added()),
                };
                let text = match &d {
                    DiffLine::Same(t) | DiffLine::Removed(t) | DiffLine::Added(t) => t,
                    DiffLine::Gap => {
                        out.push(Line::from(Span::styled("  ⋮", theme::dim())));
                        continue;
                    }
                };
                raw_line(&mut out, text, gutter, style, w);
            }
        }
    }
    out.push(Line::from(""));
    heading(
        &mut out,
        "Definition as the server gives it now:",
        theme::label(),
        w,
    );
    for line in definition_text(&v.def).trim_end_matches('\n').split('\n') {
        raw_line(&mut out, line, Span::raw("  "), Style::new(), w);
    }
    out
}

/// A tool's row in the list: `▶ ● echo  held: new` (the name is the broker-checked tool name).
pub fn list_row(name: &ServerToolName, state: &ToolState, selected: bool) -> Line<'static> {
    let mark = if selected { "▶ " } else { "  " };
    let dot = if state.is_held() { "● " } else { "○ " };
    Line::from(vec![
        Span::styled(mark.to_string(), theme::warn()),
        Span::styled(dot.to_string(), state.style()),
        Span::styled(
            format!("{name}  "),
            if selected {
                theme::title()
            } else {
                Style::new()
            },
        ),
        Span::styled(state.label(), state.style()),
    ])
}

/// What the console knows of one server of the policy in force.
#[derive(Debug, Clone)]
pub struct ServerEntry {
    pub profile: ProfileName,
    pub server: ServerName,
    /// How it is reached, from the policy (`https://…` or the stdio program).
    pub reach: String,
    pub listing: Listing,
    /// When the current listing arrived: "approve all" works only once it has been on screen
    /// for [`ARM_DELAY`].
    pub listed_at: Option<Instant>,
    /// The outcome of the last approval from this console (a refusal stays until the next).
    pub notice: Option<(String, Tone)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    Asking,
    Tools(Vec<ServerToolView>),
    /// The broker could not list it (not startable, unreachable, refused): its words.
    Failed(String),
}

/// The pane's model: the servers, the selected tool, what waits for the broker.
#[derive(Debug, Default)]
pub struct ToolsPane {
    /// `None`: the policy has not been read yet; `Some(Err)`: it could not be read.
    pub policy: Option<Result<u64, String>>,
    pub entries: Vec<ServerEntry>,
    /// The selected tool: its server (index into `entries`) and its name.
    selected: Option<(usize, ServerToolName)>,
    /// When the selected definition (this digest) appeared: its key works from [`ARM_DELAY`]
    /// later, and a new definition of the same tool starts the wait again.
    shown: Option<(Instant, [u8; 32])>,
    pub scroll: u16,
    pub viewport: u16,
    pub body_lines: u16,
    /// An approval sent for this server and not answered yet.
    pub approving: Option<usize>,
    /// "Approve all" pressed once for this server: the next press confirms.
    pub confirm_all: Option<usize>,
}

impl ToolsPane {
    /// The servers of the policy document `doc` (TOML, as `PolicyShow` gave it), each to be
    /// asked for its tools. Listings of servers that are still there are kept until the fresh
    /// ones arrive.
    pub fn set_policy(&mut self, revision: u64, doc: &str) -> Result<(), String> {
        let d = policy::doc::PolicyDoc::parse(doc)
            .map_err(|e| format!("the policy in force does not parse: {e}"))?;
        let mut found = Vec::new();
        let default = ProfileName::default_profile();
        let mut add = |profile: &ProfileName, list: &[policy::doc::McpServerDoc]| {
            for s in list {
                let server = ServerName::try_from(s.name.clone())?;
                let reach = match (&s.url, &s.command) {
                    (Some(u), _) => format!("remote {u}"),
                    (None, Some(c)) => format!("stdio {}", c.first().map_or("", |p| p.as_str())),
                    (None, None) => "not startable".into(),
                };
                found.push((profile.clone(), server, reach));
            }
            Ok::<(), String>(())
        };
        add(&default, &d.mcp_servers)?;
        for (name, p) in &d.profiles {
            add(&ProfileName::parse(name)?, &p.mcp_servers)?;
        }
        let old = std::mem::take(&mut self.entries);
        let selected = self.selected_key();
        self.entries = found
            .into_iter()
            .map(|(profile, server, reach)| {
                match old
                    .iter()
                    .find(|e| e.profile == profile && e.server == server)
                {
                    Some(e) => ServerEntry { reach, ..e.clone() },
                    None => ServerEntry {
                        profile,
                        server,
                        reach,
                        listing: Listing::Asking,
                        listed_at: None,
                        notice: None,
                    },
                }
            })
            .collect();
        self.policy = Some(Ok(revision));
        self.approving = None;
        self.confirm_all = None;
        self.selected = selected.and_then(|(p, s, t)| Some((self.index(&p, &s)?, t)));
        Ok(())
    }

    pub fn index(&self, profile: &ProfileName, server: &ServerName) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.profile == *profile && e.server == *server)
    }

    fn selected_key(&self) -> Option<(ProfileName, ServerName, ServerToolName)> {
        let (i, t) = self.selected.as_ref()?;
        let e = self.entries.get(*i)?;
        Some((e.profile.clone(), e.server.clone(), t.clone()))
    }

    /// Every tool row, in order: (server index, tool index).
    pub fn rows(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            if let Listing::Tools(v) = &e.listing {
                out.extend((0..v.len()).map(|j| (i, j)));
            }
        }
        out
    }

    /// The selected tool, with its server.
    pub fn selected(&self) -> Option<(usize, &ServerEntry, &ServerToolView)> {
        let (i, name) = self.selected.as_ref()?;
        let e = self.entries.get(*i)?;
        match &e.listing {
            Listing::Tools(v) => v.iter().find(|t| t.def.name == *name).map(|t| (*i, e, t)),
            _ => None,
        }
    }

    fn select_row(&mut self, row: Option<(usize, usize)>, now: Instant) {
        let Some((i, j)) = row else {
            self.selected = None;
            self.shown = None;
            return;
        };
        let Listing::Tools(v) = &self.entries[i].listing else {
            return;
        };
        let t = &v[j];
        if self.selected.as_ref() != Some(&(i, t.def.name.clone())) {
            self.scroll = 0;
        }
        self.selected = Some((i, t.def.name.clone()));
        self.shown = Some((now, t.digest));
    }

    /// Moves the selection `by` rows (wrapping).
    pub fn step(&mut self, by: isize, now: Instant) {
        let rows = self.rows();
        if rows.is_empty() {
            return;
        }
        let cur = self.selected_row(&rows).map_or(-1, |r| r as isize);
        let next = if cur < 0 {
            0
        } else {
            (cur + by).rem_euclid(rows.len() as isize)
        };
        self.select_row(Some(rows[next as usize]), now);
    }

    fn selected_row(&self, rows: &[(usize, usize)]) -> Option<usize> {
        let (i, name) = self.selected.as_ref()?;
        rows.iter().position(|(a, b)| {
            a == i
                && matches!(&self.entries[*a].listing, Listing::Tools(v) if v[*b].def.name == *name)
        })
    }

    /// A fresh listing of server `i` (or why there is none). The selection stays on its tool;
    /// if that tool's definition changed, its key waits [`ARM_DELAY`] again.
    pub fn set_listing(&mut self, i: usize, listing: Listing, now: Instant) {
        let Some(e) = self.entries.get_mut(i) else {
            return;
        };
        e.listing = listing;
        e.listed_at = Some(now);
        if self.confirm_all == Some(i) {
            self.confirm_all = None;
        }
        match self.selected() {
            Some((_, _, t)) => {
                let digest = t.digest;
                if self.shown.map(|(_, d)| d) != Some(digest) {
                    self.shown = Some((now, digest));
                    self.scroll = 0;
                }
            }
            None => {
                // Nothing selected (or the selected tool is gone): the first held tool, else
                // the first tool.
                let rows = self.rows();
                let held = rows.iter().copied().find(|(a, b)| {
                    matches!(&self.entries[*a].listing, Listing::Tools(v) if v[*b].held.is_some())
                });
                self.select_row(held.or(rows.first().copied()), now);
            }
        }
    }

    /// Whether the selected tool's approve key works now.
    pub fn armed(&self, now: Instant) -> bool {
        let Some((i, _, _)) = self.selected() else {
            return false;
        };
        self.approving != Some(i)
            && self
                .shown
                .is_some_and(|(t, _)| now.duration_since(t) >= ARM_DELAY)
    }

    /// Whether "approve all" works now for server `i`.
    pub fn armed_all(&self, i: usize, now: Instant) -> bool {
        self.approving != Some(i)
            && self.entries.get(i).is_some_and(|e| {
                e.listed_at
                    .is_some_and(|t| now.duration_since(t) >= ARM_DELAY)
            })
    }

    /// The held tools of server `i`, each with the digest shown.
    pub fn held_of(&self, i: usize) -> Vec<(ServerToolName, [u8; 32])> {
        match self.entries.get(i).map(|e| &e.listing) {
            Some(Listing::Tools(v)) => v
                .iter()
                .filter(|t| t.held.is_some())
                .map(|t| (t.def.name.clone(), t.digest))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn held_count(&self) -> usize {
        (0..self.entries.len()).map(|i| self.held_of(i).len()).sum()
    }

    pub fn scroll_by(&mut self, by: i32) {
        let max = self.body_lines.saturating_sub(self.viewport);
        self.scroll = (i32::from(self.scroll) + by).clamp(0, i32::from(max)) as u16;
    }
}

/// The pane's key legend for the selected tool of server `i`.
pub fn keys(pane: &ToolsPane, now: Instant) -> Vec<Line<'static>> {
    let Some((i, e, t)) = pane.selected() else {
        return vec![Line::from(Span::styled(
            "r  ask every server again · Esc back to the approvals",
            theme::dim(),
        ))];
    };
    if pane.approving == Some(i) {
        return vec![Line::from(Span::styled(
            "approval sent; waiting for the broker…",
            theme::dim(),
        ))];
    }
    let held = pane.held_of(i);
    if pane.confirm_all == Some(i) {
        let names: Vec<String> = held.iter().map(|(n, _)| n.to_string()).collect();
        return vec![Line::from(vec![
            Span::styled(
                format!(
                    "approve all {} held tool(s) of {} as shown ({}): press ",
                    held.len(),
                    e.server,
                    names.join(", ")
                ),
                theme::warn(),
            ),
            Span::styled(" A ", theme::key()),
            Span::styled(" again to confirm, Esc to cancel", theme::warn()),
        ])];
    }
    let mut spans = Vec::new();
    if t.held.is_some() {
        spans.push(Span::styled(" a ", theme::key()));
        spans.push(Span::styled(" approve this definition  ", theme::allow()));
    }
    if !held.is_empty() {
        spans.push(Span::styled(" A ", theme::key()));
        spans.push(Span::styled(
            format!(" approve all {} held of {}  ", held.len(), e.server),
            theme::allow(),
        ));
    }
    spans.push(Span::styled(" r ", theme::key()));
    spans.push(Span::styled(" list again  ", Style::new()));
    spans.push(Span::styled(" Esc ", theme::key()));
    spans.push(Span::styled(" back", Style::new()));
    let mut lines = vec![Line::from(spans)];
    if (t.held.is_some() && !pane.armed(now)) || (!held.is_empty() && !pane.armed_all(i, now)) {
        lines.push(Line::from(Span::styled(
            "(keys work in a moment: this definition just appeared)",
            theme::dim(),
        )));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrap::line_text;

    fn def(desc: &str, schema: &str, annotations: Option<&str>) -> ToolDef {
        ToolDef {
            name: ServerToolName::try_from("echo".to_string()).unwrap(),
            title: None,
            description: Some(desc.into()),
            input_schema: JsonText::try_from(schema.to_string()).unwrap(),
            output_schema: None,
            annotations: annotations.map(|a| JsonText::try_from(a.to_string()).unwrap()),
        }
    }

    fn view(now: ToolDef, pinned: Option<ToolDef>, held: bool) -> ServerToolView {
        ServerToolView {
            def: now,
            digest: [0xab; 32],
            held: held.then(|| "changed since you approved it (description)".into()),
            pinned,
        }
    }

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(line_text).collect()
    }

    const SCHEMA: &str = r#"{"properties":{"text":{"type":"string"}},"type":"object"}"#;
    const SCHEMA2: &str =
        r#"{"properties":{"text":{"type":"string"},"to":{"type":"string"}},"type":"object"}"#;

    #[test]
    fn the_state_says_new_changed_with_its_parts_or_pinned() {
        let a = def("Returns the text.", SCHEMA, None);
        let b = def("Sends the text.", SCHEMA2, Some(r#"{"readOnlyHint":true}"#));
        assert_eq!(
            ToolState::of(&view(a.clone(), None, false)),
            ToolState::Pinned
        );
        assert_eq!(
            ToolState::of(&view(a.clone(), None, true)).label(),
            "held: new"
        );
        assert_eq!(
            ToolState::of(&view(b, Some(a.clone()), true)).label(),
            "held: changed (description, input schema, annotations)"
        );
        // A pinned tool whose pin the broker sent anyway is still pinned: the broker decides.
        assert_eq!(
            ToolState::of(&view(a.clone(), Some(a), false)),
            ToolState::Pinned
        );
    }

    #[test]
    fn the_definition_pretty_prints_the_schema_and_marks_annotations_as_a_claim() {
        let t = definition_text(&def(
            "line one\nline two",
            SCHEMA,
            Some(r#"{"readOnlyHint":true}"#),
        ));
        assert_eq!(
            t,
            "name: echo\ndescription:\n  line one\n  line two\ninput schema:\n  {\n    \"properties\": {\n      \"text\": {\n        \"type\": \"string\"\n      }\n    },\n    \"type\": \"object\"\n  }\nannotations (the server's claim; the policy never reads it):\n  {\n    \"readOnlyHint\": true\n  }\n"
        );
    }

    #[test]
    fn the_diff_shows_the_approved_and_the_new_description_and_schema() {
        let old = def("Returns the text.", SCHEMA, None);
        let new = def("Sends the text to a stranger.", SCHEMA2, None);
        let d = definition_diff(&old, &new);
        assert!(d.contains(&DiffLine::Same("name: echo".into())), "{d:?}");
        assert!(d.contains(&DiffLine::Same("description:".into())), "{d:?}");
        assert_eq!(
            d.last(),
            Some(&DiffLine::Gap),
            "the schema's end is left out: {d:?}"
        );
        let changed: Vec<DiffLine> = d
            .into_iter()
            .filter(|l| matches!(l, DiffLine::Removed(_) | DiffLine::Added(_)))
            .collect();
        assert_eq!(
            changed,
            [
                DiffLine::Removed("  Returns the text.".into()),
                DiffLine::Added("  Sends the text to a stranger.".into()),
                DiffLine::Added("      },".into()),
                DiffLine::Added("      \"to\": {".into()),
                DiffLine::Added("        \"type\": \"string\"".into()),
            ]
        );
    }

    #[test]
    fn the_diff_leaves_out_unchanged_lines_far_from_a_change() {
        let schema = |extra: &str| {
            let props: Vec<String> = (0..8)
                .map(|i| format!(r#""p{i}":{{"type":"string"}}"#))
                .collect();
            format!(
                r#"{{"properties":{{{}}},"required":[{extra}],"type":"object"}}"#,
                props.join(",")
            )
        };
        let old = def("Returns the text.", &schema(""), None);
        let new = def("Returns the text.", &schema(r#""p0""#), None);
        let d = definition_diff(&old, &new);
        assert_eq!(d.first(), Some(&DiffLine::Gap), "{d:?}");
        assert!(!d.contains(&DiffLine::Same("name: echo".into())), "{d:?}");
        let changed: Vec<&DiffLine> = d
            .iter()
            .filter(|l| matches!(l, DiffLine::Removed(_) | DiffLine::Added(_)))
            .collect();
        assert_eq!(
            changed,
            [
                &DiffLine::Removed("    \"required\": [],".into()),
                &DiffLine::Added("    \"required\": [".into()),
                &DiffLine::Added("      \"p0\"".into()),
                &DiffLine::Added("    ],".into()),
            ]
        );
        // The same definition has no diff at all.
        assert!(definition_diff(&old, &old).is_empty());
    }

    #[test]
    fn a_hostile_description_reaches_the_detail_and_the_diff_only_escaped() {
        let old = def("Returns the text.", SCHEMA, None);
        let evil = "ok\x1b[2J\x1b]0;pwned\x07 \u{202e}txet\u{202c}\r";
        let v = view(def(evil, SCHEMA, None), Some(old), true);
        let p = ProfileName::default_profile();
        let s = ServerName::try_from("remote".to_string()).unwrap();
        let lines = detail(&p, &s, &v, 60);
        let all = texts(&lines).join("\n");
        for raw in ['\x1b', '\x07', '\u{202e}', '\u{202c}', '\r'] {
            assert!(!all.contains(raw), "{raw:?} reached the screen raw:\n{all}");
        }
        assert!(
            all.contains("  ok\\x1b[2J\\x1b]0;pwned\\x07 \\u{202E}txet\\u{202C}\\r"),
            "{all}"
        );
        assert!(
            all.contains("+   ok\\x1b[2J"),
            "the diff's + line, escaped:\n{all}"
        );
        assert!(all.contains("-   Returns the text."), "{all}");
        assert!(all.contains("held: changed (description)"), "{all}");
        assert!(all.contains("digest abababababababab"), "{all}");
        // The escapes are styled apart from the text around them.
        let esc = lines
            .iter()
            .flat_map(|l| l.spans.iter())
            .find(|s| s.content == "\\x1b")
            .expect("an escape span");
        assert_eq!(esc.style, theme::escape());
    }

    #[test]
    fn the_detail_wraps_rather_than_cuts() {
        let long = "word ".repeat(40);
        let v = view(def(&long, SCHEMA, None), None, true);
        let p = ProfileName::default_profile();
        let s = ServerName::try_from("remote".to_string()).unwrap();
        let lines = texts(&detail(&p, &s, &v, 30));
        assert!(lines
            .iter()
            .all(|l| unicode_width::UnicodeWidthStr::width(l.as_str()) <= 30));
        let joined: String = lines
            .iter()
            .map(|l| l.trim_start_matches("  ").trim_start_matches("↪ "))
            .collect();
        assert_eq!(joined.matches("word").count(), 40);
        // A new tool has nothing to diff against.
        assert!(!lines.iter().any(|l| l.starts_with("Changes since")));
    }
}
