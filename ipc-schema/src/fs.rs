//! Messages between the broker and the fs-helper.
//!
//! Paths travel as raw bytes (`Vec<u8>`), never as `String`: a file name that is not UTF-8 keeps
//! its bytes end to end. Every path names a place inside a directory grant, either as
//! [`FsPath::InGrant`] (a grant id and a path relative to its root) or as [`FsPath::Absolute`]
//! (the helper picks the grant whose root contains it, longest root first). The helper answers
//! every request with one [`FsReply`]; a refusal is [`FsReply::Failed`] with a typed
//! [`FsErrorKind`] and a message a user can act on.
//!
//! Everything fits one frame ([`crate::MAX_FRAME`], 1 MiB): reads are paged
//! ([`READ_CHUNK_MAX`] per call), writes carry at most [`WRITE_MAX`] bytes, and listings and search
//! results stop early with a [`StopReason`] before their frame would overflow.

use serde::{Deserialize, Serialize};

/// The most bytes one [`FsRequest::ReadFile`] returns; read larger files in pages by offset.
pub const READ_CHUNK_MAX: u32 = 512 * 1024;
/// The most content one [`FsRequest::WriteFile`] (or the result of one edit) may carry.
pub const WRITE_MAX: u32 = 768 * 1024;
/// Files above this size (or binary files) get a checkpoint marked unrestorable.
pub const CHECKPOINT_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// How long a checkpoint is kept.
pub const CHECKPOINT_TTL_SECS: u64 = 7 * 24 * 60 * 60;

/// The most bytes the fs-helper's grants may take together (every root, include and exclude,
/// a few bytes of framing each): its [`FsHelperConfig`] is one command-line argument, hex
/// encoded (twice the bytes), and Linux takes at most 128 KiB in one argument. A policy past it
/// is refused whole, saying so, rather than leaving a helper that cannot be started.
pub const CONFIG_GRANTS_MAX_BYTES: usize = 48 * 1024;

/// A grant's id, as the broker named it in the helper's [`FsHelperConfig`]
/// (`[A-Za-z0-9_.-]{1,64}`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantId(pub String);

impl std::fmt::Display for GrantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a request points.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub enum FsPath {
    /// A path relative to the root of `grant` (`/`-separated bytes; empty or `.` is the root).
    /// `..` may not climb above the root.
    InGrant { grant: GrantId, path: Vec<u8> },
    /// An absolute path as the agent wrote it. The grant is the one whose root is a
    /// component-wise prefix of the path as written (no `..` folding before that match).
    Absolute(Vec<u8>),
}

/// What a grant lets the agent do under its root.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Caps {
    pub read: bool,
    /// Create files and replace them whole (`write_file`), and be the target of a move.
    pub write: bool,
    /// Change existing text files (`edit_file`).
    pub edit: bool,
    /// Delete, and be the source of a move.
    pub delete: bool,
}

/// The access a request needs; [`FsRequest::Resolve`] checks it the way the real call will.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// read_file, list_dir, stat, search_files, grep.
    Read,
    /// write_file; the destination of move_path.
    Write,
    /// edit_file.
    Edit,
    /// delete_path; the source of move_path. The last component is not followed if it is a link.
    Delete,
}

/// What a path names, seen on the opened descriptor.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    /// Only for [`Access::Delete`] (the link itself) and in listings.
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    /// Nothing there yet (a write may create it; its parent exists).
    Missing,
}

/// A path after resolution: what the broker shows on an approval card and keys policy on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResolvedTarget {
    pub grant: GrantId,
    /// The grant's canonical root (absolute, no links).
    pub root: Vec<u8>,
    /// The canonical path relative to the root, links inside the grant followed (`""`: the root).
    pub relative: Vec<u8>,
    /// `root` joined with `relative`.
    pub absolute: Vec<u8>,
    pub kind: FileKind,
}

/// A file's length and SHA-256, taken after a change (or before, for a preview). Binding a
/// change to a seal makes it refuse with [`FsErrorKind::ChangedSince`] if the file moved on.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seal {
    pub len: u64,
    pub sha256: [u8; 32],
}

/// Caps on a recursive walk. The helper clamps each to its own maximum (see `docs/fs-helper.md`);
/// zero means "the helper's default".
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalkLimits {
    /// Directory levels below the starting directory (1: its entries only).
    pub max_depth: u32,
    /// Directory entries looked at, in total.
    pub max_entries: u32,
    /// Wall-clock budget in milliseconds.
    pub max_millis: u32,
    /// Also enter hidden directories, `.git` and build output (`target`, `node_modules`, ...).
    pub include_skipped_dirs: bool,
}

/// Extra caps for [`FsRequest::Grep`]; zero means "the helper's default".
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrepLimits {
    pub max_matches: u32,
    /// Bytes of file content read, in total.
    pub max_bytes: u64,
    /// Files larger than this are skipped (not read).
    pub max_file_bytes: u64,
}

/// How [`FsRequest::WriteFile`] treats an existing file.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Create or replace.
    Either,
    /// Refuse with [`FsErrorKind::AlreadyExists`] if something is there.
    MustNotExist,
    /// Refuse with [`FsErrorKind::NotFound`] if nothing is there.
    MustExist,
}

/// One change to a UTF-8 text file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Replace `old` by `new`. `old` must occur exactly once unless `replace_all`.
    Replace {
        old: String,
        new: String,
        replace_all: bool,
    },
    /// Apply a unified diff (one file's hunks; `---`/`+++` headers optional and ignored).
    /// Context must match exactly; no fuzz.
    UnifiedDiff(String),
}

/// The id of a checkpoint (opaque; printable ASCII).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckpointId(pub String);

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether [`FsRequest::Undo`] can bring the old state back.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Restorability {
    Restorable,
    /// Kept as a record only (binary, over 8 MiB, special file, ...).
    Unrestorable {
        reason: String,
    },
}

/// What kind of change a checkpoint records.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Write,
    Edit,
    Delete,
    Move,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub id: CheckpointId,
    pub change: ChangeKind,
    /// The path changed (for a move, its source).
    pub target: ResolvedTarget,
    /// For a move, where it went.
    pub moved_to: Option<ResolvedTarget>,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    pub expires_unix: u64,
    pub restorability: Restorability,
    /// Undone already.
    pub undone: bool,
}

/// What a write, edit, delete or move did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ChangeReceipt {
    pub checkpoint: CheckpointInfo,
    /// The file after the change (`None` after a delete, or a move of something that is not a
    /// regular file).
    pub seal: Option<Seal>,
    /// The file did not exist before.
    pub created: bool,
    /// The file was rewritten in place rather than replaced by rename, and why (a rename would
    /// have changed its owner, or its directory refused a new file).
    pub in_place: Option<String>,
    /// For [`Edit::Replace`]: how many occurrences were replaced; for a diff, hunks applied.
    pub replacements: u32,
    /// For a recursive delete: entries removed (files, links, directories).
    pub entries: u32,
}

/// A change computed but not made (`dry_run`): what the broker shows the human.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ChangePreview {
    pub target: ResolvedTarget,
    /// The file as it is now (`None`: it does not exist). Pass it back as `expected` so the
    /// real call refuses if the file changed after the human saw this preview.
    pub current: Option<Seal>,
    /// The file as it would be.
    pub proposed: Seal,
    /// A unified diff (UTF-8; `None` when either side is not UTF-8 text).
    pub diff: Option<String>,
    pub replacements: u32,
}

/// Read bytes of a file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileChunk {
    pub target: ResolvedTarget,
    pub offset: u64,
    /// (`serde_bytes`: the same postcard bytes as a `Vec<u8>`, written and read in one copy.)
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The file's size when it was read.
    pub file_size: u64,
    /// `offset + data.len() >= file_size`.
    pub eof: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub target: ResolvedTarget,
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub nlink: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub modified_unix_nanos: i128,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (raw bytes).
    pub name: Vec<u8>,
    /// What the entry is, links not followed.
    pub kind: FileKind,
    /// Size of regular files (0 otherwise).
    pub size: u64,
    /// A protected name: listed, but every operation on it is refused.
    pub protected: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub dir: ResolvedTarget,
    /// Sorted by name bytes; entries excluded by the grant's globs are left out.
    pub entries: Vec<DirEntry>,
    /// Entries in the directory (after exclusion), for paging.
    pub total: u32,
    /// Pass as `offset` to get the next page.
    pub next_offset: Option<u32>,
}

/// Why a walk or listing stopped before the end.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    MaxEntries,
    MaxMatches,
    MaxBytes,
    Deadline,
    /// The reply would not fit one frame.
    ReplyFull,
}

/// A path found by a walk.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FoundPath {
    /// Relative to the grant root.
    pub relative: Vec<u8>,
    pub kind: FileKind,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SearchResults {
    pub base: ResolvedTarget,
    pub matches: Vec<FoundPath>,
    /// Directories not entered because of `max_depth`.
    pub depth_limited: bool,
    pub stopped: Option<StopReason>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GrepMatch {
    /// Relative to the grant root.
    pub relative: Vec<u8>,
    /// 1-based.
    pub line_number: u64,
    /// The line's bytes without its newline, cut at 1 KiB.
    pub line: Vec<u8>,
    pub line_truncated: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GrepResults {
    pub base: ResolvedTarget,
    pub matches: Vec<GrepMatch>,
    pub files_searched: u64,
    /// Binary, too large, special, hard-linked or protected files passed over.
    pub files_skipped: u64,
    /// Files whose names say they hold secrets, whose matching lines the broker withheld (the
    /// grant does not allow secret files; `read_file` asks for each).
    pub secret_files_withheld: u64,
    pub depth_limited: bool,
    pub stopped: Option<StopReason>,
}

/// How the helper resolves paths on this kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
    Openat2,
    /// The kernel lacks openat2: a component-by-component walk with `O_NOFOLLOW`.
    ComponentWalk { reason: String },
}

/// What the broker tells the fs-helper at start: its one `--config` argument
/// ([`crate::codec::to_arg`]). The helper checks all of it again before it opens anything
/// (docs/fs-helper.md) and refuses to start on any fault.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FsHelperConfig {
    /// No grant means no file access.
    pub grants: Vec<GrantConfig>,
    /// Absolute and canonical: an existing directory only the helper uses (always protected).
    pub checkpoint_dir: Vec<u8>,
    /// Absolute and canonical: gatehouse's own config, data and runtime directories, refused
    /// wherever a grant reaches them.
    pub protect: Vec<Vec<u8>>,
}

impl FsHelperConfig {
    /// The helper's `--config` argument.
    pub fn to_arg(&self) -> String {
        // postcard fails only on sequences of unknown length and on types it does not support;
        // this struct has neither.
        crate::codec::to_arg(self).expect("an FsHelperConfig always encodes")
    }
}

/// A directory grant, as the broker gives it to the fs-helper and the helper reports it back in
/// [`FsStatus`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GrantConfig {
    /// `[A-Za-z0-9_.-]{1,64}`, unique among the grants.
    pub id: GrantId,
    /// Absolute and canonical (no `.`, `..`, `//`, trailing `/`, or link on the way).
    pub root: Vec<u8>,
    /// At least one.
    pub caps: Caps,
    /// Else only the root's top-level entries are granted.
    pub recursive: bool,
    /// The user confirmed a broad root: `/`, a home directory, or a directory that contains one.
    pub confirmed: bool,
    /// Globs relative to the root ([`crate::grant_glob`]); if any, they name the granted files.
    pub include: Vec<String>,
    /// Globs relative to the root; each covers a path and everything below it.
    pub exclude: Vec<String>,
}

/// What the helper enforces (shown by `doctor`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FsStatus {
    pub resolver: Resolver,
    pub grants: Vec<GrantConfig>,
    /// Absolute directories refused whatever a grant says (gatehouse's own, the checkpoint dir).
    pub protected_dirs: Vec<Vec<u8>>,
    pub checkpoints: u32,
}

/// Test-only probes, honoured only by builds with the `test-hooks` feature (a release build
/// answers [`FsErrorKind::Unsupported`]). They bypass the helper's own checks so that tests can
/// show what the kernel sandbox alone refuses.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum TestProbe {
    /// `open(path)` directly, for reading or (with `write`) for appending.
    OpenAbsolute { path: Vec<u8>, write: bool },
    /// `socket(AF_UNIX, SOCK_STREAM)`: forbidden by the fs profile's seccomp allowlist.
    CreateSocket,
    /// `execve("/bin/true")`: forbidden by seccomp.
    Exec,
}

/// Broker to fs-helper. Liveness is [`crate::Body::Ping`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FsRequest {
    /// What the helper enforces: resolver, grants, protected dirs.
    Status,
    /// Resolve a path and check `access` exactly as the real call would, without doing it.
    Resolve {
        path: FsPath,
        access: Access,
    },
    /// Up to `min(length, READ_CHUNK_MAX)` bytes from `offset` (`length` 0: the maximum).
    ReadFile {
        path: FsPath,
        offset: u64,
        length: u32,
    },
    /// A page of a directory's entries, sorted by name (`limit` 0: the helper's default).
    ListDir {
        path: FsPath,
        offset: u32,
        limit: u32,
    },
    Stat {
        path: FsPath,
    },
    /// Find names under a directory. A glob without `/` matches the file name; with `/`, the
    /// path relative to `path`.
    SearchFiles {
        path: FsPath,
        glob: String,
        limits: WalkLimits,
    },
    /// Search file contents under `path` (a directory or one file) with a regular expression
    /// (Rust `regex` syntax, line by line), optionally only in files whose name matches `glob`.
    Grep {
        path: FsPath,
        regex: String,
        glob: Option<String>,
        case_insensitive: bool,
        limits: WalkLimits,
        grep: GrepLimits,
    },
    /// Replace a file whole (or create it). With `expected`, refuse unless the file is exactly
    /// that now. With `dry_run`, answer [`FsReply::Preview`] and change nothing.
    WriteFile {
        path: FsPath,
        #[serde(with = "serde_bytes")]
        content: Vec<u8>,
        create: CreateMode,
        create_parents: bool,
        expected: Option<Seal>,
        dry_run: bool,
    },
    /// Change a UTF-8 text file.
    EditFile {
        path: FsPath,
        edit: Edit,
        expected: Option<Seal>,
        dry_run: bool,
    },
    /// Delete a file, link or empty directory; with `recursive`, a directory and everything
    /// under it.
    DeletePath {
        path: FsPath,
        recursive: bool,
        expected: Option<Seal>,
    },
    /// Rename `from` to `to` (both inside grants). Without `overwrite`, an existing `to` refuses.
    MovePath {
        from: FsPath,
        to: FsPath,
        overwrite: bool,
    },
    /// Put back what a checkpoint kept, if nothing changed since its seal.
    Undo {
        checkpoint: CheckpointId,
    },
    /// The newest checkpoints first (`limit` 0: the helper's default).
    ListCheckpoints {
        limit: u32,
    },
    /// See [`TestProbe`].
    TestProbe(TestProbe),
}

/// fs-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FsReply {
    Status(FsStatus),
    Resolved(ResolvedTarget),
    File(FileChunk),
    Listing(Listing),
    Stat(FileStat),
    Search(SearchResults),
    Grep(GrepResults),
    /// A write, edit, delete or move was made.
    Changed(ChangeReceipt),
    /// A `dry_run` write or edit.
    Preview(ChangePreview),
    /// An undo was made.
    Undone(CheckpointInfo),
    Checkpoints(Vec<CheckpointInfo>),
    /// The result of a [`TestProbe`]: `None` if the operation succeeded, else its errno.
    TestProbe {
        errno: Option<i32>,
    },
    /// Refused or failed; nothing was changed unless the message says otherwise.
    Failed(FsError),
}

/// Why an fs request was refused or failed.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsErrorKind {
    /// The path is in no grant (unknown grant id, or an absolute path under no grant root).
    NoGrant,
    /// Resolution would leave the grant root (`..` above it, a link pointing outside).
    OutsideGrant,
    /// A `/proc`-style magic link was met.
    MagicLink,
    /// A protected path (key material, shell start-up files, git hooks, gatehouse's own
    /// directories, ...): refused whatever a grant or an approval says.
    Protected,
    /// The grant does not give the capability this needs.
    NotPermitted,
    /// The grant's include/exclude globs leave this path out.
    Excluded,
    /// Below the top level of a grant that is not recursive.
    NotRecursive,
    /// Not a usable path (NUL byte, empty, a component too long, ...).
    InvalidPath,
    NotFound,
    AlreadyExists,
    /// A directory where a file was needed.
    IsADirectory,
    NotADirectory,
    /// A FIFO, socket or device node: never opened.
    SpecialFile,
    /// A regular file with more than one hard link: another name for it may lie outside the
    /// grant, so it is never opened.
    HardLinked,
    /// Over a size limit.
    TooLarge,
    /// Text was needed and the file is binary or not UTF-8.
    NotText,
    /// `Edit::Replace` found no occurrence.
    NoMatch,
    /// `Edit::Replace` found several and `replace_all` was false.
    AmbiguousMatch,
    /// A unified diff's context does not match the file.
    DiffDoesNotApply,
    /// The file is not what `expected` (or a checkpoint's seal) says: someone changed it.
    ChangedSince,
    /// The file changed between the helper's check and its use; nothing was done.
    Raced,
    /// The checkpoint cannot restore (the reason says why).
    Unrestorable,
    /// No such checkpoint (never made, expired or removed).
    NoSuchCheckpoint,
    /// The request's values are invalid (bad glob or regex, ...).
    BadRequest,
    /// Not supported by this build or kernel.
    Unsupported,
    /// Another operating-system error.
    Io,
    /// A directory with entries, and the request was not recursive.
    NotEmpty,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    pub kind: FsErrorKind,
    pub message: String,
    /// The OS error behind it, when there is one.
    pub errno: Option<i32>,
}

impl FsError {
    pub fn new(kind: FsErrorKind, message: impl Into<String>) -> Self {
        FsError {
            kind,
            message: message.into(),
            errno: None,
        }
    }

    /// The generic code the broker reports for this failure.
    pub fn error_code(&self) -> crate::ErrorCode {
        use crate::ErrorCode;
        match self.kind {
            FsErrorKind::NoGrant
            | FsErrorKind::OutsideGrant
            | FsErrorKind::MagicLink
            | FsErrorKind::Protected
            | FsErrorKind::NotPermitted
            | FsErrorKind::Excluded
            | FsErrorKind::NotRecursive
            | FsErrorKind::SpecialFile
            | FsErrorKind::HardLinked => ErrorCode::Refused,
            FsErrorKind::TooLarge => ErrorCode::Limit,
            FsErrorKind::Io => ErrorCode::Internal,
            _ => ErrorCode::Invalid,
        }
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, Envelope};

    #[test]
    fn non_utf8_paths_and_a_full_read_chunk_fit_a_frame() {
        let target = ResolvedTarget {
            grant: GrantId("g".into()),
            root: b"/r".to_vec(),
            relative: vec![0xff, b'a', 0xfe],
            absolute: vec![b'/', b'r', b'/', 0xff, b'a', 0xfe],
            kind: FileKind::File,
        };
        let reply = FsReply::File(FileChunk {
            target,
            offset: 0,
            data: vec![0x5a; READ_CHUNK_MAX as usize],
            file_size: 10 << 30,
            eof: false,
        });
        let env = Envelope::new(7, Body::FsReply(reply));
        let bytes = crate::codec::encode(&env).expect("encodes");
        assert!(bytes.len() <= crate::MAX_FRAME, "{} bytes", bytes.len());
        let back = crate::codec::decode_payload(&bytes[4..]).expect("decodes");
        assert_eq!(back, env);
    }

    #[test]
    fn bulk_bytes_have_the_wire_form_of_a_plain_vec() {
        #[derive(Serialize)]
        struct Plain(Vec<u8>);
        #[derive(Serialize)]
        struct Bulk(#[serde(with = "serde_bytes")] Vec<u8>);
        let data: Vec<u8> = (0..=255).collect();
        assert_eq!(
            postcard::to_allocvec(&Plain(data.clone())).unwrap(),
            postcard::to_allocvec(&Bulk(data)).unwrap()
        );
    }

    #[test]
    fn a_maximal_write_fits_a_frame() {
        let req = FsRequest::WriteFile {
            path: FsPath::Absolute(vec![b'a'; 4096]),
            content: vec![0; WRITE_MAX as usize],
            create: CreateMode::Either,
            create_parents: true,
            expected: Some(Seal {
                len: 1,
                sha256: [1; 32],
            }),
            dry_run: false,
        };
        let env = Envelope::new(1, Body::Fs(req));
        let bytes = crate::codec::encode(&env).expect("encodes");
        assert!(bytes.len() <= crate::MAX_FRAME, "{} bytes", bytes.len());
    }
}
