/* Escape probes, run inside a berth container by tests/escape.rs (built with gcc -static).
 *
 * usage: escape HOST_PID OTHER_DATA_PATH LXC_SOCKET
 *                                          run every probe, print "probe NAME RESULT" lines;
 *                                          LXC_SOCKET: the abstract name of another
 *                                          container's LXC command socket
 *        escape --euid                     print "euid N" (exec'd through a setuid copy)
 *        escape --getpid N                 N getpid() calls, print "ns_per_call X" (bench)
 *
 * RESULT is "ok" when the attempt SUCCEEDED (an escape), otherwise the errno name or an
 * observation. The test compares each RESULT with what it expects.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

static const char *ename(int e) {
    switch (e) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH";
    case EACCES: return "EACCES";
    case EROFS: return "EROFS";
    case EAGAIN: return "EAGAIN";
    case EINVAL: return "EINVAL";
    case ENOSYS: return "ENOSYS";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case ENODEV: return "ENODEV";
    case ENXIO: return "ENXIO";
    case ENOTDIR: return "ENOTDIR";
    case EEXIST: return "EEXIST";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case ECONNREFUSED: return "ECONNREFUSED";
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "errno%d", e);
        return buf;
    }
    }
}

static void report(const char *name, long r) {
    printf("probe %s %s\n", name, r < 0 ? ename(errno) : "ok");
    fflush(stdout);
}

/* Reads a kernel file: "ok" when it gave data (a leak), "empty" when masked. */
static void read_probe(const char *name, const char *path) {
    char b[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        report(name, -1);
        return;
    }
    ssize_t n = read(fd, b, sizeof b);
    int e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        report(name, -1);
        return;
    }
    printf("probe %s %s\n", name, n > 0 ? "ok" : "empty");
    fflush(stdout);
}

static void open_probe(const char *name, const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC, 0644);
    report(name, fd);
    if (fd >= 0)
        close(fd);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--euid")) {
        printf("euid %d\n", (int)geteuid());
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--getpid")) {
        long n = atol(argv[2]);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++)
            syscall(SYS_getpid);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("ns_per_call %.1f\n",
               ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--grantable")) {
        /* Syscalls the default profile denies and a package may be granted: harmless
         * calls (a keyring id lookup, a personality query), so that a granted call
         * succeeds and a denied one shows seccomp's EPERM. */
        report("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0));
        report("personality", syscall(SYS_personality, 0xffffffffUL));
        printf("probes done\n");
        fflush(stdout);
        pause();
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: escape HOST_PID OTHER_DATA_PATH LXC_SOCKET | --grantable | --euid | --getpid N\n");
        return 2;
    }
    pid_t host_pid = atoi(argv[1]);
    const char *other = argv[2];
    const char *lxc_socket = argv[3];
    char buf[512];

    /* kernel modules */
    report("init_module", syscall(SYS_init_module, "", 0, ""));
    report("finit_module", syscall(SYS_finit_module, 0, "", 0));
    /* mounts */
    mkdir("/tmp/m", 0700);
    report("mount_tmpfs", mount("none", "/tmp/m", "tmpfs", 0, ""));
    report("remount_root_rw", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
    report("umount_proc", umount2("/proc", MNT_DETACH));
    report("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */));
    /* the package tree and the kernel's interfaces */
    open_probe("write_package_new", "/bin/evil", O_WRONLY | O_CREAT);
    open_probe("write_package_file", "/.berth/manifest.toml", O_WRONLY);
    {
        /* the first of these the kernel has */
        const char *knobs[] = {"/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled",
                               "/sys/kernel/profiling", "/sys/power/state"};
        const char *k = knobs[0];
        for (unsigned i = 0; i < sizeof knobs / sizeof *knobs; i++)
            if (access(knobs[i], F_OK) == 0) {
                k = knobs[i];
                break;
            }
        open_probe("write_sys_kernel", k, O_WRONLY);
    }
    open_probe("write_proc_sys", "/proc/sys/kernel/core_pattern", O_WRONLY);
    open_probe("write_sysrq_trigger", "/proc/sysrq-trigger", O_WRONLY);
    open_probe("write_proc_irq", "/proc/irq/default_smp_affinity", O_WRONLY);
    {
        /* one IRQ's own affinity: the first numbered IRQ the kernel lists */
        char path[64] = "/proc/irq/0/smp_affinity";
        DIR *d = opendir("/proc/irq");
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9') {
                snprintf(path, sizeof path, "/proc/irq/%s/smp_affinity", e->d_name);
                break;
            }
        if (d)
            closedir(d);
        open_probe("write_proc_irq_n", path, O_WRONLY);
    }
    open_probe("write_proc_bus", "/proc/bus/pci/devices", O_WRONLY);
    /* kernel state that helps an exploit or leaks other users' secrets */
    read_probe("read_proc_keys", "/proc/keys");
    read_probe("read_proc_key_users", "/proc/key-users");
    read_probe("read_proc_timer_list", "/proc/timer_list");
    read_probe("read_proc_slabinfo", "/proc/slabinfo");
    read_probe("read_proc_vmallocinfo", "/proc/vmallocinfo");
    read_probe("read_proc_kallsyms", "/proc/kallsyms");
    {
        int n = -1;
        DIR *d = opendir("/proc/acpi");
        struct dirent *e;
        if (d) {
            n = 0;
            while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                    n++;
            closedir(d);
        }
        printf("probe list_proc_acpi %s\n", n < 0 ? ename(errno) : n ? "ok" : "empty");
        fflush(stdout);
    }
    /* the host's network: administering its interfaces (the same MTU back: harmless) */
    {
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        strcpy(ifr.ifr_name, "lo");
        long r = ioctl(fd, SIOCGIFMTU, &ifr);
        if (r == 0)
            r = ioctl(fd, SIOCSIFMTU, &ifr);
        report("net_admin_lo_mtu", r);
        close(fd);
    }
    /* another container's LXC command socket (abstract: reachable from the network
     * namespace it lives in, the host's, unless Landlock scopes this container) */
    {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        size_t n = strlen(lxc_socket);
        if (n > sizeof a.sun_path - 1)
            n = sizeof a.sun_path - 1;
        memcpy(a.sun_path + 1, lxc_socket, n);
        report("lxc_command_socket",
               connect(fd, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + n));
        close(fd);
    }
    /* devices */
    report("mknod_block", mknod("/tmp/sda", S_IFBLK | 0600, makedev(8, 0)));
    report("mknod_mem", mknod("/dev/mem2", S_IFCHR | 0600, makedev(1, 1)));
    open_probe("open_dev_sda", "/dev/sda", O_RDONLY);
    open_probe("open_dev_vda", "/dev/vda", O_RDONLY);
    open_probe("open_dev_loop0", "/dev/loop0", O_RDONLY);
    open_probe("open_dev_mem", "/dev/mem", O_RDONLY);
    open_probe("open_dev_kmsg", "/dev/kmsg", O_RDONLY);
    /* forged packets */
    int s = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    report("raw_packet_socket", s);
    if (s >= 0)
        close(s);
    s = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    report("raw_inet_socket", s);
    if (s >= 0)
        close(s);
    /* other processes */
    report("ptrace_host_pid", ptrace(PTRACE_ATTACH, host_pid, 0, 0));
    report("kill_host_pid", kill(host_pid, 0));
    snprintf(buf, sizeof buf, "/proc/%d/status", (int)host_pid);
    open_probe("proc_host_pid", buf, O_RDONLY);
    {
        int n = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
                n++;
        if (d)
            closedir(d);
        printf("probe visible_processes %s\n", n <= 4 ? "few" : "many");
        fflush(stdout);
    }
    /* setuid through a setuid-root file of the package */
    {
        int p[2];
        if (pipe(p) == 0) {
            pid_t c = fork();
            if (c == 0) {
                dup2(p[1], 1);
                if (setgid(1000) || setuid(1000))
                    _exit(3);
                execl("/bin/escape-suid", "escape-suid", "--euid", (char *)NULL);
                _exit(4);
            }
            close(p[1]);
            int n = read(p[0], buf, sizeof buf - 1);
            close(p[0]);
            waitpid(c, NULL, 0);
            buf[n > 0 ? n : 0] = 0;
            int euid = -1;
            sscanf(buf, "euid %d", &euid);
            printf("probe setuid_file %s\n", euid == 0 ? "ok" : euid == 1000 ? "euid1000" : "failed");
            fflush(stdout);
        }
    }
    /* the host's identity, power and clock */
    report("sethostname", sethostname("escaped", 7));
    report("reboot", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                             LINUX_REBOOT_CMD_CAD_OFF, NULL));
    report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
    report("swapon", swapon("/tmp/swap", 0));
    {
        union bpf_attr a;
        memset(&a, 0, sizeof a);
        a.map_type = BPF_MAP_TYPE_ARRAY;
        a.key_size = 4;
        a.value_size = 4;
        a.max_entries = 1;
        report("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a));
    }
    {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.type = PERF_TYPE_SOFTWARE;
        a.size = sizeof a;
        a.config = PERF_COUNT_SW_CPU_CLOCK;
        report("perf_event_open", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    }
    {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        report("clock_settime", clock_settime(CLOCK_REALTIME, &now));
        report("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
    }
    report("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0));
    report("unshare_user", unshare(CLONE_NEWUSER));
    report("unshare_mount", unshare(CLONE_NEWNS));
#ifdef SYS_iopl
    report("iopl", syscall(SYS_iopl, 3));
#endif
    report("userfaultfd", syscall(SYS_userfaultfd, 0));
    /* io_uring does its work in kernel threads that seccomp does not see */
    {
        unsigned char params[120];
        memset(params, 0, sizeof params);
        report("io_uring_setup", syscall(425 /* io_uring_setup */, 1, params));
        report("io_uring_enter", syscall(426 /* io_uring_enter */, -1, 0, 0, 0, NULL, 0));
        report("io_uring_register", syscall(427 /* io_uring_register */, -1, 0, NULL, 0));
    }
    report("fanotify_init", syscall(SYS_fanotify_init, 0, 0));
    report("pidfd_getfd", syscall(438 /* pidfd_getfd */, -1, 0, 0));
    report("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
    /* file handles (the "shocker" escape) */
    {
        struct { unsigned int bytes; int type; unsigned char h[8]; } fh = {8, 1, {2, 0, 0, 0, 0, 0, 0, 0}};
        int root = open("/", O_RDONLY | O_DIRECTORY);
        report("open_by_handle_at", syscall(SYS_open_by_handle_at, root, &fh, O_RDONLY));
        int mnt;
        struct { unsigned int bytes; int type; unsigned char h[128]; } out = {128, 0, {0}};
        report("name_to_handle_at", syscall(SYS_name_to_handle_at, root, "proc", &out, &mnt, 0));
        close(root);
    }
    /* another container's /data, directly and through /proc/PID/root of every visible pid:
     * the observation is every distinct outcome, e.g. "EACCES+ENOENT" */
    open_probe("other_data", other, O_RDONLY);
    {
        char seen[128] = "";
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            snprintf(buf, sizeof buf, "/proc/%s/root%s", e->d_name, other);
            int fd = open(buf, O_RDONLY);
            const char *r = fd >= 0 ? "ok" : ename(errno);
            if (fd >= 0)
                close(fd);
            printf("detail %s: %s\n", buf, r);
            if (!strstr(seen, r) && strlen(seen) + strlen(r) + 2 < sizeof seen) {
                /* kept sorted: outcomes are few */
                char tmp[128];
                if (seen[0] && strcmp(r, seen) < 0)
                    snprintf(tmp, sizeof tmp, "%s+%s", r, seen);
                else
                    snprintf(tmp, sizeof tmp, "%s%s%s", seen, seen[0] ? "+" : "", r);
                strcpy(seen, tmp);
            }
        }
        if (d)
            closedir(d);
        printf("probe other_data_via_proc_root %s\n", seen[0] ? seen : "none");
        fflush(stdout);
    }
    /* a fork bomb stops at the pids limit */
    {
        pid_t kids[4096];
        int n = 0, err = 0;
        while (n < 4096) {
            pid_t c = fork();
            if (c < 0) {
                err = errno;
                break;
            }
            if (c == 0) {
                pause();
                _exit(0);
            }
            kids[n++] = c;
        }
        for (int i = 0; i < n; i++)
            kill(kids[i], SIGKILL);
        for (int i = 0; i < n; i++)
            waitpid(kids[i], NULL, 0);
        printf("probe fork_bomb %s\n", err ? ename(err) : "ok");
        printf("forks %d\n", n);
        fflush(stdout);
    }
    printf("probes done\n");
    fflush(stdout);
    for (;;)
        pause();
}
