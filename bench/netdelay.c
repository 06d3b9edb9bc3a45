/* netdelay: a TCP relay that holds every byte for a fixed time in each direction.

   bench/bench_mirror.py's network path needs a link with a delay, and this machine's kernel has
   no netem (CONFIG_NET_SCH_NETEM unset): the bench runs this relay in front of nginx, inside the
   server's network namespace, so that a request crosses the tbf-shaped veth link, waits DELAY_US
   here, reaches nginx on the namespace's loopback, and its answer waits DELAY_US again on the
   way out (a round trip of 2 * DELAY_US added). Single-threaded: epoll plus one timerfd set to
   the earliest due chunk; each read becomes a chunk stamped with now + DELAY_US and is written
   on, in order, once due; an end of stream travels the same way (shutdown when due). It reads
   whatever arrives at once (no backpressure): a delay with an unbounded queue, which the bench's
   bounded transfers (a few MB a pass) never fill; tbf on the veth link sets the rate.

   usage: netdelay LISTEN_IP LISTEN_PORT TARGET_IP TARGET_PORT DELAY_US
   build: cc -O2 -o netdelay netdelay.c   (the bench builds it in its temp dir)
*/
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

struct chunk { struct chunk *next; uint64_t due; size_t len, off; char data[]; }; /* len 0: end */
struct end { struct conn *c; int side; };
struct conn {
    int fd[2];                      /* 0: the client's socket, 1: nginx's */
    struct chunk *head[2], *tail[2]; /* head[s]: bytes read from fd[s], to write to fd[1 - s] */
    int eof[2], done[2], out[2];    /* read end seen; its shutdown written; fd waits for EPOLLOUT */
    struct end ends[2];
    struct conn *next, *prev;
};

static int ep, tfd;
static uint64_t delay_ns;
static struct conn *conns;
static struct sockaddr_in target;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec;
}

static void watch(struct conn *c, int s) {
    struct epoll_event ev = {.events = (c->eof[s] ? 0 : EPOLLIN) | (c->out[s] ? EPOLLOUT : 0),
                             .data.ptr = &c->ends[s]};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd[s], &ev);
}

static void drop(struct conn *c) {
    for (int s = 0; s < 2; s++) {
        close(c->fd[s]);
        for (struct chunk *k = c->head[s], *n; k; k = n) { n = k->next; free(k); }
    }
    if (c->prev) c->prev->next = c->next; else conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

static void push(struct conn *c, int s, struct chunk *k) {
    k->next = NULL;
    k->due = now_ns() + delay_ns;
    k->off = 0;
    if (c->tail[s]) c->tail[s]->next = k; else c->head[s] = k;
    c->tail[s] = k;
}

/* Write what is due from side s to the other side; 0 ok, -1 the connection is gone. */
static int flush(struct conn *c, int s, uint64_t now) {
    int to = 1 - s;
    while (c->head[s] && c->head[s]->due <= now) {
        struct chunk *k = c->head[s];
        if (k->len == 0) {
            shutdown(c->fd[to], SHUT_WR);
            c->done[s] = 1;
        } else {
            while (k->off < k->len) {
                ssize_t n = write(c->fd[to], k->data + k->off, k->len - k->off);
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                    if (!c->out[to]) { c->out[to] = 1; watch(c, to); }
                    return 0;
                }
                if (n <= 0) return -1;
                k->off += n;
            }
        }
        c->head[s] = k->next;
        if (!c->head[s]) c->tail[s] = NULL;
        free(k);
    }
    if (c->out[to] && (!c->head[s] || c->head[s]->due > now)) { c->out[to] = 0; watch(c, to); }
    return (c->done[0] && c->done[1]) ? -1 : 0;
}

static void arm(void) {
    uint64_t next = 0;
    for (struct conn *c = conns; c; c = c->next)
        for (int s = 0; s < 2; s++)
            if (c->head[s] && (!next || c->head[s]->due < next)) next = c->head[s]->due;
    struct itimerspec it = {0};
    if (next) { it.it_value.tv_sec = next / 1000000000u; it.it_value.tv_nsec = next % 1000000000u; }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL);
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void accept_one(int lfd) {
    int a = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (a < 0) return;
    int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b < 0 || connect(b, (struct sockaddr *)&target, sizeof target) < 0) {  /* blocking: loopback */
        close(a);
        if (b >= 0) close(b);
        return;
    }
    fcntl(b, F_SETFL, fcntl(b, F_GETFL) | O_NONBLOCK);
    nodelay(a);
    nodelay(b);
    struct conn *c = calloc(1, sizeof *c);
    c->fd[0] = a;
    c->fd[1] = b;
    for (int s = 0; s < 2; s++) {
        c->ends[s] = (struct end){c, s};
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ends[s]};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd[s], &ev);
    }
    c->next = conns;
    if (conns) conns->prev = c;
    conns = c;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s LISTEN_IP LISTEN_PORT TARGET_IP TARGET_PORT DELAY_US\n", argv[0]);
        return 2;
    }
    delay_ns = strtoull(argv[5], NULL, 10) * 1000u;
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    target = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(atoi(argv[4]))};
    if (inet_pton(AF_INET, argv[1], &la.sin_addr) != 1 || inet_pton(AF_INET, argv[3], &target.sin_addr) != 1) {
        fprintf(stderr, "netdelay: bad address\n");
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 512) < 0) {
        perror("netdelay: listen");
        return 1;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL}, tev = {.events = EPOLLIN, .data.ptr = &tfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    printf("ready\n");
    fflush(stdout);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno != EINTR) { perror("netdelay: epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) { accept_one(lfd); continue; }
            if (evs[i].data.ptr == &tfd) { uint64_t x; if (read(tfd, &x, sizeof x) < 0) {} continue; }
            struct end *e = evs[i].data.ptr;
            struct conn *c = e->c;
            int s = e->side, gone = 0;
            if (!c->eof[s] && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                for (;;) {  /* read all there is: each read one chunk, stamped now */
                    struct chunk *k = malloc(sizeof *k + CHUNK);
                    ssize_t r = read(c->fd[s], k->data, CHUNK);
                    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { free(k); break; }
                    if (r <= 0) {  /* end of stream (or reset): passed on when due */
                        k->len = 0;
                        push(c, s, k);
                        c->eof[s] = 1;
                        watch(c, s);
                        break;
                    }
                    k->len = (size_t)r;
                    push(c, s, realloc(k, sizeof *k + r));
                }
            }
            if (evs[i].events & EPOLLOUT) gone = flush(c, 1 - s, now_ns()) < 0;
            if (gone) drop(c);
        }
        uint64_t now = now_ns();
        for (struct conn *c = conns, *next; c; c = next) {
            next = c->next;
            if (flush(c, 0, now) < 0 || flush(c, 1, now) < 0) drop(c);
        }
        arm();
    }
}
