/*
 * The slab VM test's flood (scripts/vm/slab/guest.sh): a TCP listener, and SYNs at it, either
 * raw from another network namespace over a veth, or from a berth container by connect()
 * alone (a container has no CAP_NET_RAW). Each SYN makes the listener's kernel allocate in
 * softirq (GFP_ATOMIC): a request socket and a SYN-ACK (an skb head from skbuff_head_cache
 * and its data from kmalloc), the allocations a device's drivers make on their receive path.
 *
 *   flood listen ADDR PORT [COUNT]  listen on PORT and the COUNT-1 ports after it (backlog up
 *                                   to somaxconn), never accept
 *   flood syn SRC DST PORT SECONDS  raw SYNs from SRC and the next address (both must be the
 *                                   sender's) to DST:PORT; prints the count sent
 *   flood connect DST PORT COUNT SECONDS
 *                                   the container's flood, for ever: waits until
 *                                   DST:PORT+COUNT takes a connection and sends a byte (the
 *                                   go), then for SECONDS opens non-blocking connections to
 *                                   DST's COUNT ports from PORT in turn, on 1024 sockets used in turn
 *                                   (each attempt dropped for the next), and writes
 *                                   "SENT FAILED" (connections) to the go
 *   flood go ADDR PORT              one go: listens on ADDR:PORT, takes one connection, writes
 *                                   it a byte (the start), prints what it writes back (the
 *                                   count); gives up after 30 s without a connection or count
 *   flood hog MIB                   the memory pressure: MIB of memory touched and held
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static unsigned short sum(const void *p, int len, unsigned int acc)
{
	const unsigned short *w = p;

	for (; len > 1; len -= 2)
		acc += *w++;
	if (len)
		acc += *(const unsigned char *)w;
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (unsigned short)~acc;
}

static int listener(const char *addr, int port, int count)
{
	for (int i = 0; i < count; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port + i) };
		int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);

		inet_pton(AF_INET, addr, &a.sin_addr);
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1 << 20)) {
			perror("listen");
			return 1;
		}
	}
	for (;;)
		pause();
}

static int hog(long mib)
{
	char *p = malloc(mib << 20);

	if (!p) {
		perror("malloc");
		return 1;
	}
	for (long i = 0; i < mib << 20; i += 4096)
		((volatile char *)p)[i] = 1;
	printf("%ld\n", mib);
	fflush(stdout);
	for (;;)
		pause();
}

static int syn(const char *src, const char *dst, int port, int seconds)
{
	struct {
		struct iphdr ip;
		struct tcphdr tcp;
	} pkt;
	struct {
		unsigned int src, dst;
		unsigned char zero, proto;
		unsigned short len;
		struct tcphdr tcp;
	} pseudo;
	struct sockaddr_in to = { .sin_family = AF_INET };
	unsigned long sent = 0, n = 0;
	unsigned int base = 0;
	time_t end = time(NULL) + seconds;
	int s = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);

	if (s < 0) {
		perror("raw socket");
		return 1;
	}
	inet_pton(AF_INET, dst, &to.sin_addr);
	memset(&pkt, 0, sizeof(pkt));
	pkt.ip.version = 4;
	pkt.ip.ihl = 5;
	pkt.ip.ttl = 64;
	pkt.ip.protocol = IPPROTO_TCP;
	pkt.ip.tot_len = htons(sizeof(pkt));
	inet_pton(AF_INET, src, &base);
	pkt.ip.daddr = to.sin_addr.s_addr;
	pkt.tcp.dest = htons(port);
	pkt.tcp.doff = 5;
	pkt.tcp.syn = 1;
	pkt.tcp.window = htons(65535);
	while (time(NULL) < end) {
		n++;
		pkt.ip.id = htons(n);
		/* Two addresses by 64 000 ports: each SYN a new connection for 128 000 SYNs. */
		pkt.ip.saddr = htonl(ntohl(base) + (n & 1));
		pkt.tcp.source = htons(1024 + (n >> 1) % 64000);
		pkt.tcp.seq = htonl(n * 2654435761u);
		pkt.tcp.check = 0;
		pseudo.src = pkt.ip.saddr;
		pseudo.dst = pkt.ip.daddr;
		pseudo.zero = 0;
		pseudo.proto = IPPROTO_TCP;
		pseudo.len = htons(sizeof(pkt.tcp));
		pseudo.tcp = pkt.tcp;
		pkt.tcp.check = sum(&pseudo, sizeof(pseudo), 0);
		if (sendto(s, &pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)) > 0)
			sent++;
		/* The receive path runs in this process's softirq: let the CPU go now and then. */
		if (!(n % 64))
			sched_yield();
	}
	printf("%lu\n", sent);
	return 0;
}

/* A TCP socket to ADDR:PORT, or -1; non-blocking if asked (then EINPROGRESS is success). */
static int dial(const struct sockaddr_in *to, int nonblocking)
{
	int s = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);

	if (s < 0)
		return -1;
	if (connect(s, (const struct sockaddr *)to, sizeof(*to)) && errno != EINPROGRESS) {
		close(s);
		return -1;
	}
	return s;
}

/* One flood for SECONDS: connections to TO's address and COUNT ports from TO's, on RING
 * sockets in turn; writes "SENT FAILED" to OUT. A connection is one SYN. */
static void connect_for(struct sockaddr_in to, int count, int seconds, int ring_size, int out)
{
	int first = ntohs(to.sin_port);
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	static int ring[1024];
	unsigned long sent = 0, failed = 0, n = 0;
	time_t end = time(NULL) + seconds;
	char line[64];

	for (int i = 0; i < ring_size; i++)
		ring[i] = -1;
	while (time(NULL) < end) {
		int *slot = &ring[n++ % ring_size];

		/* Each port its own connections: a source port comes round again only after as
		 * many connections to every port (a repeat would end the listener's request). */
		to.sin_port = htons(first + n % count);
		/* A socket is used again: connect(AF_UNSPEC) drops its attempt (no packet sent,
		 * its port let go), and the next connect() sends a new SYN from another port,
		 * without the cost of a new socket. */
		if (*slot >= 0 && !connect(*slot, (const struct sockaddr *)&unspec, sizeof(unspec)) &&
		    (!connect(*slot, (const struct sockaddr *)&to, sizeof(to)) || errno == EINPROGRESS)) {
			sent++;
			continue;
		}
		if (*slot >= 0)
			close(*slot);
		*slot = dial(&to, 1);
		if (*slot >= 0)
			sent++;
		else
			failed++;
	}
	for (int i = 0; i < ring_size; i++)
		if (ring[i] >= 0)
			close(ring[i]);
	snprintf(line, sizeof(line), "%lu %lu\n", sent, failed);
	/* A go that has gone is no reason to die of SIGPIPE: the next go comes. */
	if (send(out, line, strlen(line), MSG_NOSIGNAL) < 0)
		perror("flood: result");
}

static _Noreturn void flood_connect(const char *dst, int port, int count, int seconds)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct sockaddr_in go = { .sin_family = AF_INET, .sin_port = htons(port + count) };
	struct rlimit nofile;
	int ring_size = 1024;

	inet_pton(AF_INET, dst, &to.sin_addr);
	go.sin_addr = to.sin_addr;
	/* As many descriptors as the container may have (the soft limit up to the hard one). */
	if (!getrlimit(RLIMIT_NOFILE, &nofile)) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
		getrlimit(RLIMIT_NOFILE, &nofile);
		if (nofile.rlim_cur < (rlim_t)ring_size + 16)
			ring_size = nofile.rlim_cur > 32 ? (int)nofile.rlim_cur - 16 : 16;
	}
	for (;;) {
		char line[16];
		int c;

		while ((c = dial(&go, 0)) < 0)
			usleep(100000);
		/* The go's byte: a connection the go's accept() never took (it gave up) is no go,
		 * and a reset lost under pressure is not waited for beyond 40 s. */
		struct timeval within = { .tv_sec = 40 };
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &within, sizeof(within));
		if (read(c, line, 1) != 1) {
			close(c);
			continue;
		}
		connect_for(to, count, seconds, ring_size, c);
		/* Until the go has read the count and closed: only then dial again. */
		shutdown(c, SHUT_WR);
		while (read(c, line, sizeof(line)) > 0)
			;
		close(c);
	}
}

static int go(const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), c;
	char buf[64];
	ssize_t n;
	int got = 0;

	inet_pton(AF_INET, addr, &a.sin_addr);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1)) {
		perror("go: listen");
		return 1;
	}
	/* A live flooder dials every 100 ms: 30 s without it is a flooder that is not there. */
	alarm(30);
	c = accept(s, NULL, NULL);
	if (c < 0) {
		perror("go: accept");
		return 1;
	}
	/* One go, one flood: the flooder's next dial is refused until the next go listens. */
	close(s);
	alarm(0);
	/* The flood starts at this byte, and its count comes within 30 s. */
	struct timeval count_within = { .tv_sec = 30 };
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &count_within, sizeof(count_within));
	if (send(c, "g", 1, MSG_NOSIGNAL) != 1) {
		perror("go: start");
		return 1;
	}
	/* A reset after the count (the flooder's close racing its last sockets') is no error. */
	while ((n = read(c, buf, sizeof(buf))) > 0) {
		fwrite(buf, 1, n, stdout);
		got = 1;
	}
	if (n < 0 && !got)
		perror("go: no count");
	return n < 0 && !got;
}

int main(int argc, char **argv)
{
	if ((argc == 4 || (argc == 5 && atoi(argv[4]) > 0)) && !strcmp(argv[1], "listen"))
		return listener(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 1);
	if (argc == 3 && !strcmp(argv[1], "hog"))
		return hog(atol(argv[2]));
	if (argc == 6 && !strcmp(argv[1], "connect") && atoi(argv[4]) > 0)
		flood_connect(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	if (argc == 4 && !strcmp(argv[1], "go"))
		return go(argv[2], atoi(argv[3]));
	if (argc == 6 && !strcmp(argv[1], "syn"))
		return syn(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: flood listen ADDR PORT [COUNT] | flood syn SRC DST PORT SECONDS |\n"
		"       flood connect DST PORT COUNT SECONDS | flood go ADDR PORT | flood hog MIB\n");
	return 2;
}
