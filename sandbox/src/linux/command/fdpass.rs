//! Descriptors over Unix stream sockets (`SCM_RIGHTS`), for the two places the exec sandbox
//! passes them: the proxy connector that travels with a `Start` frame, and each proxy client
//! connection the sandbox's bridge hands out. The one implementation is [`ipc_schema::fdpass`]
//! (safe, on rustix); this path stays for the callers that name it.

pub use ipc_schema::fdpass::{recv_with_fds, send_frame_with_fd, send_with_fd, MAX_FDS_PER_READ};
