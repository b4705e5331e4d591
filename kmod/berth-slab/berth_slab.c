// SPDX-License-Identifier: GPL-2.0
/*
 * berth-slab: free objects kept in chosen slab caches ("slab injection").
 *
 * A driver that allocates in atomic context (a Wi-Fi driver's socket buffers) cannot make the
 * kernel reclaim memory for a slab cache; if a container has made the kernel use up that
 * cache's free objects, the allocation fails and the driver may loop until the watchdog
 * reboots the device. This module keeps a reserve of free objects in each cache named: it
 * allocates objects until their slab pages hold the reserve, then frees every object but one
 * per page, so the pages stay in the cache (a slab with one object in use is never given back)
 * with their free objects ready for anyone, atomic context included.
 *
 * Control (root only, process context only):
 *   /sys/module/berth_slab/parameters/caches   "NAME:OBJECTS ..." (write: replace; "" clears)
 *   /sys/module/berth_slab/parameters/state    one line per cache:
 *                                               NAME OBJECTS HELD PAGES OBJECT_SIZE
 *   max_reserve (load time only)               the most objects one cache may be asked for
 *
 * Caches are found by name on the kernel's list of caches. Only caches that live as long as
 * the kernel are taken (the kmalloc-N families and the socket buffers' caches): a cache a
 * module destroys while objects are kept would leak. A cache whose objects are larger than
 * half a page is refused (a slab of one object holds no free object when it stays).
 * A write is checked whole before anything changes; a fill that fails (no memory) leaves no
 * reserve at all. `caches=` given to insmod is applied by the module's init, so a load that
 * fails keeps nothing.
 */

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/version.h>

/* What the module needs of the kernel, said at build time rather than at load. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
#error "berth_slab reads SLUB's cache layout from <linux/slub_def.h>, which Linux 6.8 made private: kernels before 6.8 only"
#endif
#ifndef CONFIG_SLUB
#error "berth_slab needs the SLUB allocator (CONFIG_SLUB)"
#endif
#ifndef CONFIG_KPROBES
#error "berth_slab finds kallsyms_lookup_name with a kprobe: it needs CONFIG_KPROBES"
#endif
#ifndef CONFIG_KALLSYMS_ALL
#error "berth_slab looks up the kernel's cache list (slab_caches, a data symbol) in kallsyms: it needs CONFIG_KALLSYMS_ALL"
#endif
/*
 * struct kmem_cache is in slub_def.h, which slab.h does not include; its last inline helpers
 * use mm/slab.h's struct slab, which the headers package does not ship. They are never
 * called here: a declaration is enough for them to compile.
 */
struct slab {
	unsigned int objects;
};
static inline void *slab_address(const struct slab *slab)
{
	return NULL;
}
#include <linux/slub_def.h>
#include <linux/kprobes.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/list.h>
#include <linux/sort.h>
#include <linux/string.h>

#define MAX_CACHES 16
#define NAME_LEN 64
/* The largest max_reserve accepted at load: 1M objects (256 MiB of kmalloc-256). */
#define RESERVE_LIMIT (1U << 20)

static unsigned int max_reserve = 16384;
module_param(max_reserve, uint, 0444);
MODULE_PARM_DESC(max_reserve, "the most free objects one cache may be asked to keep");

struct reserve {
	char name[NAME_LEN];
	struct kmem_cache *cache;
	unsigned int want;
	unsigned int held;
	unsigned int npages; /* slabs kept */
	unsigned int pages; /* their pages */
	void **kept; /* one object on each slab kept */
};

static struct reserve reserves[MAX_CACHES];
static int nreserves;
static DEFINE_MUTEX(lock);
/* Before init: `caches=` from insmod, kept for init. After exit began: writes refused. */
static bool live, exiting;
static char *pending;

static struct list_head *caches_list;
static struct mutex *caches_mutex;

/* The kernel's list of caches and its lock: not exported, found through kallsyms (itself
 * found with a kprobe, the one way a module can since 5.7). */
static int resolve(void)
{
	typedef unsigned long (*lookup_t)(const char *);
	struct kprobe kp = { .symbol_name = "kallsyms_lookup_name" };
	lookup_t lookup;

	if (caches_list)
		return 0;
	if (register_kprobe(&kp) < 0) {
		pr_err("berth_slab: no kprobes: cannot find the kernel's slab caches\n");
		return -ENOSYS;
	}
	lookup = (lookup_t)kp.addr;
	unregister_kprobe(&kp);
	if (!lookup)
		return -ENOSYS;
	caches_mutex = (struct mutex *)lookup("slab_mutex");
	caches_list = (struct list_head *)lookup("slab_caches");
	if (!caches_list || !caches_mutex) {
		caches_list = NULL;
		pr_err("berth_slab: slab_caches or slab_mutex not in kallsyms (CONFIG_KALLSYMS_ALL)\n");
		return -ENOSYS;
	}
	return 0;
}

static struct kmem_cache *find(const char *name)
{
	struct kmem_cache *s, *found = NULL;

	mutex_lock(caches_mutex);
	list_for_each_entry(s, caches_list, list) {
		if (!strcmp(s->name, name)) {
			found = s;
			break;
		}
	}
	mutex_unlock(caches_mutex);
	return found;
}

/* Caches built into the kernel, which are never destroyed. */
static bool lasting(const char *name)
{
	return !strncmp(name, "kmalloc-", 8) || !strncmp(name, "dma-kmalloc-", 12) ||
	       !strcmp(name, "skbuff_head_cache") || !strcmp(name, "skbuff_fclone_cache");
}

static unsigned int objects_per_slab(struct kmem_cache *s)
{
	/* The low 16 bits of `oo` (order and objects) are the objects of a slab. */
	return s->oo.x & 0xffff;
}

/* Objects in a slab of the cache's minimum order (`min`), at least 2 (objects larger than
 * half a page are refused). */
static unsigned int min_objects_per_slab(struct kmem_cache *s)
{
	return max(s->min.x & 0xffff, 2U);
}

/*
 * Objects in the slab whose head page is `page`: SLUB makes a slab of the cache's order, or
 * of its smaller minimum order (`min`) when memory is too fragmented for that, and a slab of
 * order k holds (PAGE_SIZE << k) / size objects.
 */
static unsigned int slab_objects(struct kmem_cache *s, struct page *page)
{
	return (PAGE_SIZE << compound_order(page)) / s->size;
}

static int by_page(const void *a, const void *b)
{
	unsigned long pa = (unsigned long)virt_to_head_page(*(void *const *)a);
	unsigned long pb = (unsigned long)virt_to_head_page(*(void *const *)b);

	return pa < pb ? -1 : pa > pb;
}

static void release(struct reserve *r)
{
	unsigned int i;

	for (i = 0; i < r->npages; i++)
		kmem_cache_free(r->cache, r->kept[i]);
	kvfree(r->kept);
	r->kept = NULL;
	r->npages = 0;
	r->pages = 0;
	r->held = 0;
}

/* Sorts objs[0..n) by slab and returns the free objects that the whole slabs (every object
 * of the slab is in objs) would hold, one object kept on each. */
static unsigned long whole_slabs(struct kmem_cache *s, void **objs, unsigned long n)
{
	unsigned long start, i, free = 0;

	sort(objs, n, sizeof(void *), by_page, NULL);
	for (start = 0; start < n; start = i) {
		struct page *page = virt_to_head_page(objs[start]);
		unsigned int per = slab_objects(s, page);

		for (i = start + 1; i < n && virt_to_head_page(objs[i]) == page; i++)
			;
		if (i - start == per)
			free += per - 1;
	}
	return free;
}

/*
 * Allocates objects until enough slabs are wholly the module's, keeps one object on each of
 * the slabs the reserve needs (and one slab more) and frees every other object: the free
 * objects held are new free objects in the cache. Only whole slabs are kept: the free slots
 * of a slab others use were free before. The cache's empty slabs are discarded first, so a
 * whole slab is a new one. Objects are asked in rounds (a busy cache's free slots take the
 * first ones), at most ROUNDS. A slab of the cache's minimum order (fragmented memory) holds
 * fewer objects than one of its usual order, and is whole when all of its own are here.
 * Process context (GFP_KERNEL): it may sleep.
 */
#define ROUNDS 4
static noinline int fill(struct reserve *r)
{
	unsigned int per = objects_per_slab(r->cache);
	unsigned long round, n = 0, i, start, free = 0, slabs;
	bool failed = false;
	int k;
	void **objs;

	might_sleep();
	if (per < 2)
		return -EINVAL;
	/* The reserve's slabs and one more, if no object went to a slab others use. */
	round = ((unsigned long)r->want / (per - 1) + 2) * per;
	objs = kvmalloc_array(round * ROUNDS, sizeof(void *), GFP_KERNEL | __GFP_NOWARN);
	/* The most whole slabs the objects can make: all of the smallest kind. */
	slabs = round * ROUNDS / min_objects_per_slab(r->cache) + 1;
	r->kept = kvmalloc_array(slabs, sizeof(void *), GFP_KERNEL | __GFP_NOWARN);
	if (!objs || !r->kept) {
		kvfree(objs);
		kvfree(r->kept);
		r->kept = NULL;
		return -ENOMEM;
	}
	kmem_cache_shrink(r->cache);
	for (k = 0; k < ROUNDS && !failed && free < r->want + per; k++) {
		unsigned long end = n + round;

		for (; n < end; n++) {
			/* A big reserve on a kernel without preemption: let others run. */
			if (!(n % 1024))
				cond_resched();
			/* No OOM kill for a reserve: it fails instead. */
			objs[n] = kmem_cache_alloc(r->cache, GFP_KERNEL | __GFP_NOWARN | __GFP_NORETRY);
			if (!objs[n]) {
				failed = true;
				break;
			}
		}
		free = whole_slabs(r->cache, objs, n);
	}
	/* objs is sorted by page: each run of one page's objects in turn. */
	for (start = 0; start < n; start = i) {
		struct page *page = virt_to_head_page(objs[start]);
		unsigned int objects = slab_objects(r->cache, page);
		unsigned long j = start;

		for (i = start + 1; i < n && virt_to_head_page(objs[i]) == page; i++)
			;
		if (i - start == objects && r->held < r->want + per && r->npages < slabs) {
			r->kept[r->npages++] = objs[j++];
			r->held += objects - 1;
			r->pages += 1U << compound_order(page);
		}
		for (; j < i; j++)
			kmem_cache_free(r->cache, objs[j]);
		cond_resched();
	}
	kvfree(objs);
	/*
	 * The CPUs' own slabs into the node's lists: their free objects then show in
	 * /proc/slabinfo (which counts a CPU slab's as in use) and are there for every CPU.
	 * Empty slabs are discarded; the pages kept are not empty.
	 */
	kmem_cache_shrink(r->cache);
	pr_info("berth_slab: %s: %u free objects held on %u slabs (asked %u)\n", r->name,
		r->held, r->npages, r->want);
	return r->held >= r->want ? 0 : -ENOMEM;
}

static void release_all(void)
{
	int i;

	for (i = 0; i < nreserves; i++)
		release(&reserves[i]);
	nreserves = 0;
}

/* "NAME:OBJECTS" separated by spaces, commas or newlines; every entry is checked before any
 * reserve changes. */
static int apply(const char *val)
{
	struct reserve *next;
	char *buf, *cur, *tok;
	int n = 0, i, err;

	err = resolve();
	if (err)
		return err;
	buf = kstrdup(val, GFP_KERNEL);
	next = kcalloc(MAX_CACHES, sizeof(*next), GFP_KERNEL);
	if (!buf || !next) {
		kfree(buf);
		kfree(next);
		return -ENOMEM;
	}
	cur = buf;
	err = 0;
	while ((tok = strsep(&cur, " ,\n\t")) != NULL) {
		char *colon;
		struct reserve *r;
		unsigned int size;

		if (!*tok)
			continue;
		if (n == MAX_CACHES) {
			pr_err("berth_slab: more than %d caches\n", MAX_CACHES);
			err = -E2BIG;
			break;
		}
		r = &next[n];
		colon = strrchr(tok, ':');
		if (!colon || colon == tok || strlen(tok) - strlen(colon) >= NAME_LEN) {
			pr_err("berth_slab: %s: expected NAME:OBJECTS\n", tok);
			err = -EINVAL;
			break;
		}
		*colon = '\0';
		strscpy(r->name, tok, NAME_LEN);
		if (kstrtouint(colon + 1, 10, &r->want) || r->want == 0) {
			pr_err("berth_slab: %s: %s is not a number of objects\n", r->name, colon + 1);
			err = -EINVAL;
			break;
		}
		if (r->want > max_reserve) {
			pr_err("berth_slab: %s: %u objects is above max_reserve (%u)\n", r->name,
			       r->want, max_reserve);
			err = -E2BIG;
			break;
		}
		for (i = 0; i < n; i++) {
			if (!strcmp(next[i].name, r->name)) {
				pr_err("berth_slab: %s named twice\n", r->name);
				err = -EINVAL;
				break;
			}
		}
		if (err)
			break;
		if (!lasting(r->name)) {
			pr_err("berth_slab: %s: not a cache built into the kernel (kmalloc-N, skbuff_head_cache, skbuff_fclone_cache)\n",
			       r->name);
			err = -EPERM;
			break;
		}
		r->cache = find(r->name);
		if (!r->cache) {
			pr_err("berth_slab: %s: no such slab cache\n", r->name);
			err = -ENOENT;
			break;
		}
		size = kmem_cache_size(r->cache);
		if (size > PAGE_SIZE / 2 || objects_per_slab(r->cache) < 2) {
			pr_err("berth_slab: %s: objects of %u bytes are too close to a page to keep free\n",
			       r->name, size);
			err = -EINVAL;
			break;
		}
		n++;
	}
	kfree(buf);
	if (err) {
		kfree(next);
		return err;
	}
	mutex_lock(&lock);
	if (exiting) {
		err = -ENODEV;
	} else {
		release_all();
		for (i = 0; i < n && !err; i++) {
			reserves[i] = next[i];
			nreserves = i + 1;
			err = fill(&reserves[i]);
		}
		/* All or nothing: a reserve half made is none. */
		if (err)
			release_all();
	}
	mutex_unlock(&lock);
	kfree(next);
	return err;
}

static int set_caches(const char *val, const struct kernel_param *kp)
{
	/* From insmod, before init: kept for init, which also knows the final max_reserve. */
	if (!live) {
		char *copy = kstrdup(val, GFP_KERNEL);

		if (!copy)
			return -ENOMEM;
		kfree(pending);
		pending = copy;
		return 0;
	}
	return apply(val);
}

static int get_caches(char *buf, const struct kernel_param *kp)
{
	int i, len = 0;

	mutex_lock(&lock);
	if (!live && pending)
		len += scnprintf(buf + len, PAGE_SIZE - len, "%s", pending);
	for (i = 0; i < nreserves; i++)
		len += scnprintf(buf + len, PAGE_SIZE - len, "%s%s:%u", i ? " " : "",
				 reserves[i].name, reserves[i].want);
	mutex_unlock(&lock);
	len += scnprintf(buf + len, PAGE_SIZE - len, "\n");
	return len;
}

static int get_state(char *buf, const struct kernel_param *kp)
{
	int i, len = 0;

	mutex_lock(&lock);
	for (i = 0; i < nreserves; i++) {
		struct reserve *r = &reserves[i];

		len += scnprintf(buf + len, PAGE_SIZE - len, "%s %u %u %u %u\n", r->name, r->want,
				 r->held, r->pages,
				 kmem_cache_size(r->cache));
	}
	mutex_unlock(&lock);
	return len;
}

static int refuse(const char *val, const struct kernel_param *kp)
{
	return -EPERM;
}

static const struct kernel_param_ops caches_ops = {
	.set = set_caches,
	.get = get_caches,
};
static const struct kernel_param_ops state_ops = {
	.set = refuse,
	.get = get_state,
};
module_param_cb(caches, &caches_ops, NULL, 0644);
MODULE_PARM_DESC(caches, "NAME:OBJECTS ...: the caches and the free objects each keeps");
module_param_cb(state, &state_ops, NULL, 0444);
MODULE_PARM_DESC(state, "NAME OBJECTS HELD PAGES OBJECT_SIZE per cache");

static int __init berth_slab_init(void)
{
	int err;

	if (max_reserve > RESERVE_LIMIT) {
		pr_err("berth_slab: max_reserve %u is above %u\n", max_reserve, RESERVE_LIMIT);
		err = -EINVAL;
		goto out;
	}
	err = resolve();
	if (err)
		goto out;
	live = true;
	if (pending)
		err = apply(pending);
out:
	kfree(pending);
	pending = NULL;
	if (err) {
		mutex_lock(&lock);
		release_all();
		mutex_unlock(&lock);
	}
	return err;
}

static void __exit berth_slab_exit(void)
{
	mutex_lock(&lock);
	exiting = true;
	release_all();
	mutex_unlock(&lock);
}

module_init(berth_slab_init);
module_exit(berth_slab_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("berth: free objects kept in chosen slab caches for atomic allocations");
