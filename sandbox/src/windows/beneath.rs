//! Opening one name beneath a directory handle on Windows, the fs-helper's counterpart of
//! Linux's `openat(dirfd, name, O_NOFOLLOW)`: Windows has no openat2, but the native
//! `NtCreateFile` opens a name relative to a handle (`OBJECT_ATTRIBUTES.RootDirectory`), and
//! `FILE_OPEN_REPARSE_POINT` opens a symbolic link or junction itself instead of what it names.
//!
//! What the helper builds on this (fs-helper-windows): a walk from a grant root's handle, one
//! component per open, each a plain name it checked, refusing every reparse point it meets, so
//! no step leaves the directory it started from. Each handle is opened without
//! `FILE_SHARE_DELETE`: while the walk holds it, nobody can rename or delete that directory,
//! so the chain from the root to the target cannot be moved under the walk (which is also what
//! cap-std relies on there).

use std::fs::File;
use std::io;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle};
use std::path::PathBuf;
use windows_sys::Wdk::Foundation::OBJECT_ATTRIBUTES;
use windows_sys::Wdk::Storage::FileSystem::{
    FileDirectoryInformation, FileRenameInformation, NtCreateFile, NtQueryDirectoryFile,
    NtSetInformationFile, FILE_CREATE, FILE_DIRECTORY_FILE, FILE_DIRECTORY_INFORMATION,
    FILE_NON_DIRECTORY_FILE, FILE_OPEN, FILE_OPEN_REPARSE_POINT, FILE_RENAME_INFORMATION,
    FILE_SYNCHRONOUS_IO_NONALERT,
};
use windows_sys::Win32::Foundation::{
    RtlNtStatusToDosError, HANDLE, OBJ_CASE_INSENSITIVE, STATUS_NO_MORE_FILES, UNICODE_STRING,
};
use windows_sys::Win32::Storage::FileSystem::{
    FileAttributeTagInfo, FileDispositionInfo, GetFileInformationByHandle,
    GetFileInformationByHandleEx, GetFinalPathNameByHandleW, SetFileInformationByHandle,
    BY_HANDLE_FILE_INFORMATION, DELETE, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_ATTRIBUTE_TAG_INFO, FILE_DISPOSITION_INFO, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_GENERIC_READ, FILE_GENERIC_WRITE, FILE_LIST_DIRECTORY,
    FILE_NAME_NORMALIZED, FILE_READ_ATTRIBUTES, FILE_READ_DATA, FILE_SHARE_READ, FILE_SHARE_WRITE,
    FILE_TRAVERSE, SYNCHRONIZE, VOLUME_NAME_DOS,
};
use windows_sys::Win32::System::IO::IO_STATUS_BLOCK;

/// What the opened name must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A directory the walk continues through (or lists).
    Dir,
    /// Whatever is there (a file to read, a directory to list, a reparse point to refuse).
    Any,
}

/// One entry of a directory, as the file system lists it (no file is opened for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The name in UTF-16, as stored.
    pub name: Vec<u16>,
    /// `FILE_ATTRIBUTE_*` (a reparse point has `FILE_ATTRIBUTE_REPARSE_POINT`).
    pub attributes: u32,
    pub size: u64,
}

fn nt_error(status: i32) -> io::Error {
    // SAFETY: a pure function of its argument.
    io::Error::from_raw_os_error(unsafe { RtlNtStatusToDosError(status) } as i32)
}

/// Opens `name` in the directory `parent` for reading, the name itself and never what a
/// reparse point in its place names (`FILE_OPEN_REPARSE_POINT`); `Want::Dir` refuses anything
/// but a directory (ERROR_DIRECTORY). The caller checks that `name` is one plain component (no
/// separator, no `:` stream, not `.` or `..`): the kernel is given it as written. Shared for
/// reading and writing by others, never for deleting (see the module docs). An empty `name`
/// opens `parent` itself afresh: a new open file, with its own listing position.
pub fn open_beneath(parent: BorrowedHandle<'_>, name: &str, want: Want) -> io::Result<File> {
    let (access, options) = match want {
        Want::Dir => (
            FILE_LIST_DIRECTORY | FILE_TRAVERSE | FILE_READ_ATTRIBUTES | SYNCHRONIZE,
            FILE_DIRECTORY_FILE,
        ),
        // FILE_READ_DATA is FILE_LIST_DIRECTORY: a directory opened this way can be listed.
        Want::Any => (FILE_READ_DATA | FILE_READ_ATTRIBUTES | SYNCHRONIZE, 0),
    };
    let share = FILE_SHARE_READ | FILE_SHARE_WRITE;
    nt_open(parent, name, access, FILE_OPEN, options, share)
}

/// A file attribute: the name is a reparse point (a link, junction, mount point, placeholder).
pub const REPARSE_POINT: u32 = FILE_ATTRIBUTE_REPARSE_POINT;
/// A file attribute: a directory.
pub const DIRECTORY: u32 = FILE_ATTRIBUTE_DIRECTORY;

/// Opens the directory `path` (a grant root, by its full path, once before lockdown) as
/// [`open_beneath`] opens one: listing, passing through and reading attributes, never
/// following a reparse point, shared for reading and writing but not for deleting.
pub fn open_dir_path(path: &std::path::Path) -> io::Result<File> {
    use std::os::windows::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .access_mode(FILE_LIST_DIRECTORY | FILE_TRAVERSE | FILE_READ_ATTRIBUTES | SYNCHRONIZE)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)
}

/// What [`create_beneath`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum New {
    /// A file, open for reading, writing and deleting (a temporary file renamed into place).
    File,
    /// A directory.
    Dir,
}

/// Creates `name` in `parent` (failing if anything has that name: ERROR_FILE_EXISTS), as
/// [`open_beneath`] takes a name. A new file is shared for reading only until it is closed.
pub fn create_beneath(parent: BorrowedHandle<'_>, name: &str, new: New) -> io::Result<File> {
    let (access, options, share) = match new {
        New::File => (
            FILE_GENERIC_READ | FILE_GENERIC_WRITE | DELETE,
            FILE_NON_DIRECTORY_FILE,
            FILE_SHARE_READ,
        ),
        New::Dir => (
            FILE_LIST_DIRECTORY | FILE_TRAVERSE | FILE_READ_ATTRIBUTES | SYNCHRONIZE,
            FILE_DIRECTORY_FILE,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
        ),
    };
    nt_open(parent, name, access, FILE_CREATE, options, share)
}

/// Opens `name` in `parent` (the name itself, never followed) to delete it or to write it in
/// place: reading, writing and deleting, shared with other readers and writers.
pub fn open_to_change(parent: BorrowedHandle<'_>, name: &str) -> io::Result<File> {
    nt_open(
        parent,
        name,
        FILE_GENERIC_READ | FILE_GENERIC_WRITE | DELETE,
        FILE_OPEN,
        0,
        FILE_SHARE_READ | FILE_SHARE_WRITE,
    )
}

fn nt_open(
    parent: BorrowedHandle<'_>,
    name: &str,
    access: u32,
    disposition: u32,
    options: u32,
    share: u32,
) -> io::Result<File> {
    let wide: Vec<u16> = name.encode_utf16().collect();
    let bytes = u16::try_from(wide.len() * 2)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the name is too long"))?;
    let object = UNICODE_STRING {
        Length: bytes,
        MaximumLength: bytes,
        Buffer: wide.as_ptr() as *mut u16,
    };
    let attrs = OBJECT_ATTRIBUTES {
        Length: std::mem::size_of::<OBJECT_ATTRIBUTES>() as u32,
        RootDirectory: parent.as_raw_handle() as HANDLE,
        ObjectName: &object,
        Attributes: OBJ_CASE_INSENSITIVE,
        ..Default::default()
    };
    let mut handle: HANDLE = std::ptr::null_mut();
    let mut iosb = IO_STATUS_BLOCK::default();
    // SAFETY: every pointer is to a live local (`object` borrows `wide`, both outlive the
    // call); `parent` is a handle the caller holds open for the call's length; on success the
    // kernel hands back a handle this process now owns, wrapped at once.
    let status = unsafe {
        NtCreateFile(
            &mut handle,
            access,
            &attrs,
            &mut iosb,
            std::ptr::null(),
            0,
            share,
            disposition,
            options | FILE_OPEN_REPARSE_POINT | FILE_SYNCHRONOUS_IO_NONALERT,
            std::ptr::null(),
            0,
        )
    };
    if status < 0 {
        return Err(nt_error(status));
    }
    // SAFETY: a fresh handle from the kernel, owned by nobody else.
    Ok(unsafe { File::from_raw_handle(handle as _) })
}

/// Renames the open `file` (opened with DELETE access) to `name` in the directory `dir`,
/// replacing a file of that name if `replace` (never a directory: ERROR_ACCESS_DENIED). The
/// native call (`NtSetInformationFile`, `FileRenameInformation`): its `RootDirectory` makes
/// `name` relative to `dir`'s handle, as every other name here.
pub fn rename_into(
    file: &File,
    dir: BorrowedHandle<'_>,
    name: &str,
    replace: bool,
) -> io::Result<()> {
    let wide: Vec<u16> = name.encode_utf16().collect();
    let head = std::mem::offset_of!(FILE_RENAME_INFORMATION, FileName);
    let size = head + wide.len() * 2;
    // u64s: the struct holds a handle, so it is 8-byte aligned.
    let mut buf = vec![
        0u64;
        size.div_ceil(8)
            .max(std::mem::size_of::<FILE_RENAME_INFORMATION>().div_ceil(8))
    ];
    let info = buf.as_mut_ptr().cast::<FILE_RENAME_INFORMATION>();
    let mut iosb = IO_STATUS_BLOCK::default();
    // SAFETY: `buf` is at least `size` bytes (and a whole struct), 8-aligned and zeroed; the
    // header is written through the struct's fields and the name's units right after it,
    // within `size`; `dir` and `file` are handles the caller holds for the call's length.
    let status = unsafe {
        (*info).Anonymous.ReplaceIfExists = replace;
        (*info).RootDirectory = dir.as_raw_handle() as HANDLE;
        (*info).FileNameLength = (wide.len() * 2) as u32;
        std::ptr::copy_nonoverlapping(
            wide.as_ptr(),
            buf.as_mut_ptr().cast::<u8>().add(head).cast::<u16>(),
            wide.len(),
        );
        NtSetInformationFile(
            file.as_raw_handle() as HANDLE,
            &mut iosb,
            buf.as_ptr().cast(),
            (buf.len() * 8) as u32,
            FileRenameInformation,
        )
    };
    if status < 0 {
        return Err(nt_error(status));
    }
    Ok(())
}

/// Marks the open `file` (opened with DELETE access) to be deleted when its last handle
/// closes (a directory must be empty by then).
pub fn delete_on_close(file: &File) -> io::Result<()> {
    let info = FILE_DISPOSITION_INFO { DeleteFile: true };
    // SAFETY: `info` is a live local of the size passed.
    let ok = unsafe {
        SetFileInformationByHandle(
            file.as_raw_handle() as HANDLE,
            FileDispositionInfo,
            (&info as *const FILE_DISPOSITION_INFO).cast(),
            std::mem::size_of::<FILE_DISPOSITION_INFO>() as u32,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The reparse tag of an open file that has `FILE_ATTRIBUTE_REPARSE_POINT` (0 if it has none).
pub fn reparse_tag(f: &File) -> io::Result<u32> {
    let mut info = FILE_ATTRIBUTE_TAG_INFO::default();
    // SAFETY: `info` is a live local of the size passed.
    let ok = unsafe {
        GetFileInformationByHandleEx(
            f.as_raw_handle() as HANDLE,
            FileAttributeTagInfo,
            (&mut info as *mut FILE_ATTRIBUTE_TAG_INFO).cast(),
            std::mem::size_of::<FILE_ATTRIBUTE_TAG_INFO>() as u32,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.ReparseTag)
}

/// The path the system gives an open file (`\\?\C:\...`, the long names, as stored), which
/// is what the helper checks against its grant roots and the protected table: a short (8.3)
/// name or another spelling in the request does not survive into it.
pub fn final_path(f: &File) -> io::Result<PathBuf> {
    let mut buf = vec![0u16; 512];
    loop {
        // SAFETY: `buf` is live and its length is what is passed.
        let n = unsafe {
            GetFinalPathNameByHandleW(
                f.as_raw_handle() as HANDLE,
                buf.as_mut_ptr(),
                buf.len() as u32,
                FILE_NAME_NORMALIZED | VOLUME_NAME_DOS,
            )
        } as usize;
        match n {
            0 => return Err(io::Error::last_os_error()),
            n if n < buf.len() => {
                buf.truncate(n);
                return Ok(PathBuf::from(String::from_utf16_lossy(&buf)));
            }
            // Too small: `n` is the length needed, with its NUL.
            n if n <= 32 * 1024 + 1 => buf.resize(n, 0),
            _ => return Err(io::Error::other("the system gave a path over 32,768 units")),
        }
    }
}

/// Every entry of the directory `dir` (opened with [`Want::Dir`] or [`Want::Any`]), `.` and
/// `..` left out, in the order the file system gives them.
pub fn list_dir(dir: &File) -> io::Result<Vec<Listed>> {
    // u64s: the entries inside are 8-byte aligned.
    let mut buf = vec![0u64; 8 * 1024];
    let mut out = Vec::new();
    let mut restart = true;
    loop {
        let mut iosb = IO_STATUS_BLOCK::default();
        // SAFETY: `buf` is live, its length in bytes is what is passed; the handle is open and
        // synchronous (FILE_SYNCHRONOUS_IO_NONALERT), so the call has finished when it returns.
        let status = unsafe {
            NtQueryDirectoryFile(
                dir.as_raw_handle() as HANDLE,
                std::ptr::null_mut(),
                None,
                std::ptr::null(),
                &mut iosb,
                buf.as_mut_ptr().cast(),
                (buf.len() * 8) as u32,
                FileDirectoryInformation,
                false,
                std::ptr::null(),
                restart,
            )
        };
        restart = false;
        if status == STATUS_NO_MORE_FILES {
            return Ok(out);
        }
        if status < 0 {
            return Err(nt_error(status));
        }
        let bytes = buf.len() * 8;
        let base = buf.as_ptr().cast::<u8>();
        let mut at = 0usize;
        loop {
            let head = std::mem::offset_of!(FILE_DIRECTORY_INFORMATION, FileName);
            if at + head > bytes {
                return Err(io::Error::other(
                    "the directory listing ran past its buffer",
                ));
            }
            // SAFETY: `at + head` is within `buf` (checked), `at` is a multiple of 8 (the
            // system aligns each entry), so the header is readable as the struct.
            let e = unsafe { &*(base.add(at) as *const FILE_DIRECTORY_INFORMATION) };
            let len = e.FileNameLength as usize / 2;
            if at + head + len * 2 > bytes {
                return Err(io::Error::other("a directory entry ran past its buffer"));
            }
            // SAFETY: the name's `len` units lie within `buf` (checked just above); u16
            // alignment holds at an 8-aligned entry's name offset.
            let name =
                unsafe { std::slice::from_raw_parts(base.add(at + head) as *const u16, len) };
            if name != [b'.' as u16] && name != [b'.' as u16, b'.' as u16] {
                out.push(Listed {
                    name: name.to_vec(),
                    attributes: e.FileAttributes,
                    size: e.EndOfFile.max(0) as u64,
                });
            }
            match e.NextEntryOffset as usize {
                0 => break,
                n => at += n,
            }
        }
    }
}

/// Which file an open handle is (its volume and file index) and how many names it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub volume: u32,
    pub index: u64,
    pub links: u32,
}

pub fn identity(f: &File) -> io::Result<Identity> {
    let mut info = BY_HANDLE_FILE_INFORMATION::default();
    // SAFETY: `info` is a live local the call fills.
    if unsafe { GetFileInformationByHandle(f.as_raw_handle() as HANDLE, &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Identity {
        volume: info.dwVolumeSerialNumber,
        index: (info.nFileIndexHigh as u64) << 32 | info.nFileIndexLow as u64,
        links: info.nNumberOfLinks,
    })
}

/// How many names the open file has (hard links).
pub fn link_count(f: &File) -> io::Result<u64> {
    identity(f).map(|i| i.links as u64)
}
