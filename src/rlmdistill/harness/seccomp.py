"""The seccomp filter of the bwrap sandbox: system calls model code has no use for, refused.

The filter is built with libseccomp (through ``pyseccomp``, ctypes bindings over the system's
``libseccomp.so.2``) and handed to bubblewrap as a compiled BPF program (``bwrap --seccomp
FD``), which loads it just before it starts the REPL. Everything not listed is allowed (a deny
list: the REPL is ordinary Python). Refused calls fail with ``EPERM``, except ``clone3``, which
fails with ``ENOSYS`` so that the C library falls back to ``clone``, whose namespace flags the
filter can see (``clone3`` passes its flags in memory, out of seccomp's reach). System calls of
another architecture (32-bit ``int 0x80`` on x86-64) kill the process (libseccomp's default).
"""

from __future__ import annotations

import errno
import functools
import tempfile

REFUSED = (
    # new namespaces and mounts: a nested user namespace has every capability inside it
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # other processes' memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    # kernel keyrings (not namespaced)
    "keyctl",
    "add_key",
    "request_key",
    # large kernel attack surfaces the REPL never needs
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "iopl",
    "ioperm",
)
"""System calls refused whatever their arguments."""

CLONE_NAMESPACE_FLAGS = (
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
"""``clone`` flags that make a namespace: ``clone`` with any of them is refused."""

AF_PACKET = 17
SOCK_RAW = 3
SOCK_TYPE_MASK = 0xF


@functools.lru_cache(maxsize=1)
def filter_program() -> tuple[bytes | None, str]:
    """``(BPF program, description)`` of the filter, built once per process; the program is
    None where libseccomp cannot be loaded (the description then says why).

    The program refuses :data:`REFUSED`, ``clone`` with a namespace flag, ``clone3``, raw
    sockets (``SOCK_RAW`` of any family) and packet sockets (``AF_PACKET``)."""
    try:
        import pyseccomp as sc

        f = sc.SyscallFilter(sc.ALLOW)
        refused = []
        for name in REFUSED:
            try:
                f.add_rule(sc.ERRNO(errno.EPERM), name)
                refused.append(name)
            except (OSError, ValueError, RuntimeError):  # unknown to this libseccomp/arch
                continue
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for flag in CLONE_NAMESPACE_FLAGS:
            f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(errno.EPERM), "socket", sc.Arg(0, sc.EQ, AF_PACKET))
        f.add_rule(
            sc.ERRNO(errno.EPERM), "socket", sc.Arg(1, sc.MASKED_EQ, SOCK_TYPE_MASK, SOCK_RAW)
        )
        with tempfile.TemporaryFile() as fh:
            f.export_bpf(fh)
            fh.seek(0)
            program = fh.read()
    except (ImportError, OSError, RuntimeError, AttributeError) as exc:
        return None, (
            f"no seccomp filter (libseccomp could not be used: {exc}); the sandbox still "
            "runs without capabilities"
        )
    return program, (
        f"seccomp refuses {len(refused)} system calls (mount, unshare, setns, ptrace, keyctl, "
        "bpf, perf_event_open, userfaultfd, ...), clone with namespace flags, clone3, raw and "
        "packet sockets"
    )
