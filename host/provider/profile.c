/*
** Profiles: the built-in ones and users' own from a JSON file (format in
** README.md, "Your own profiles"). A user profile starts from a base profile and adds binds,
** environment entries and limits, and may switch the network; everything
** is checked at load so a typo fails loudly instead of weakening a sandbox.
*/
#define _GNU_SOURCE
#include "profile.h"
#include "context.h"
#include "utf8.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every profile this provider knows: the built-ins first, then the file's (the context's part). */
typedef struct profile_table {
  profile *all;
  size_t n;
} profile_table;

static profile_table *table(void) {
  return CTX_PART(profiles);
}

/* Sandbox paths a bind may not cover: the sandbox's own areas and the kernel's. */
static const char *const reserved_sandbox_paths[] = {
  "/", "/workspace", "/tmp", "/proc", "/dev", NULL
};

/* A user profile file larger than this is certainly a mistake. */
#define PROFILES_FILE_MAX (1024 * 1024)

/* ====================================================== helpers */

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) abort();   /* out of memory at configuration time: nothing sensible to do */
  return p;
}

static char *xstrdup(const char *s) {
  char *d = strdup(s);
  if (!d) abort();
  return d;
}

static char **env_copy(char *const *env) {
  size_t n = 0;
  while (env && env[n]) n++;
  char **copy = xcalloc(n + 1, sizeof *copy);
  for (size_t i = 0; i < n; i++) copy[i] = xstrdup(env[i]);
  return copy;
}

static void profile_clear(profile *p) {
  free(p->name);
  for (size_t i = 0; p->env && p->env[i]; i++) free(p->env[i]);
  free(p->env);
  for (size_t i = 0; i < p->nbinds; i++) {
    free(p->binds[i].host_path);
    free(p->binds[i].sandbox_path);
  }
  free(p->binds);
  free(p->root);
  memset(p, 0, sizeof *p);
}

/* A deep copy of base under a new name: the starting point of a user profile. */
static void profile_derive(profile *dst, const profile *base, const char *name) {
  *dst = *base;
  dst->name = xstrdup(name);
  dst->env = env_copy(base->env);
  dst->binds = xcalloc(base->nbinds, sizeof *dst->binds);
  for (size_t i = 0; i < base->nbinds; i++) {
    dst->binds[i].host_path = xstrdup(base->binds[i].host_path);
    dst->binds[i].sandbox_path = xstrdup(base->binds[i].sandbox_path);
    dst->binds[i].writable = base->binds[i].writable;
  }
  dst->root = base->root ? xstrdup(base->root) : NULL;
}

static profile *profile_append(void) {
  profile_table *t = table();
  profile *grown = realloc(t->all, (t->n + 1) * sizeof *grown);
  if (!grown) abort();
  t->all = grown;
  memset(&t->all[t->n], 0, sizeof *t->all);
  return &t->all[t->n++];
}

static const profile *profile_find_full(const char *full) {
  profile_table *t = table();
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->all[i].name, full) == 0) return &t->all[i];
  return NULL;
}

/* ====================================================== built-in profiles */

static void add_builtin(const char *name, isolation iso, bool network, bool automatic) {
  profile *p = profile_append();
  p->name = xstrdup(name);
  p->isolation = iso;
  p->network = network;
  p->automatic = automatic;
  p->env = xcalloc(1, sizeof *p->env);
  limits_init(&p->limits);
}

static void add_builtins(void) {
  add_builtin("bwrap/default", ISOLATION_NAMESPACES, false, false);
  add_builtin("bwrap/network", ISOLATION_NAMESPACES, true, false);
  add_builtin("local/default", ISOLATION_NONE, true, false);
  /*
  ** auto/default promises no isolation of its own (isolation is what a
  ** profile guarantees); being automatic, it takes bubblewrap where that
  ** works, and the session says what it got.
  */
  add_builtin("auto/default", ISOLATION_NONE, false, true);
}

static bool is_builtin_name(const char *name) {
  return strcmp(name, "bwrap/default") == 0 || strcmp(name, "bwrap/network") == 0 ||
         strcmp(name, "local/default") == 0 || strcmp(name, "auto/default") == 0;
}

/* ====================================================== user profiles: fields */

/* "PROVIDER/NAME", both parts non-empty, one slash, no spaces or control characters. */
static bool valid_profile_name(const char *s) {
  const char *slash = strchr(s, '/');
  if (!slash || slash == s || slash[1] == '\0' || strchr(slash + 1, '/')) return false;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c <= ' ' || *c == 0x7f) return false;
  return true;
}

/* Absolute, no "." or ".." components, no "//" and no trailing slash (except "/"). */
static bool is_clean_absolute(const char *path) {
  if (path[0] != '/') return false;
  if (strcmp(path, "/") == 0) return true;
  const char *p = path;
  while (*p) {
    const char *start = ++p;            /* p was on a '/' */
    while (*p && *p != '/') p++;
    size_t len = (size_t)(p - start);
    if (len == 0) return false;
    if ((len == 1 && start[0] == '.') || (len == 2 && start[0] == '.' && start[1] == '.'))
      return false;
  }
  return true;
}

/* True when path is prefix itself or lies under it. */
static bool path_within(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  if (strcmp(prefix, "/") == 0) return strcmp(path, "/") == 0;
  return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Binds may not hide the sandbox's own areas; they may go anywhere else. */
static const char *reserved_overlap(const char *sandbox_path) {
  for (int i = 0; reserved_sandbox_paths[i]; i++)
    if (path_within(sandbox_path, reserved_sandbox_paths[i])) return reserved_sandbox_paths[i];
  return NULL;
}

static int check_keys(const cJSON *obj, const char *const *known, const char *where,
                      char *err, size_t errlen) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    int i = 0;
    while (known[i] && strcmp(known[i], it->string) != 0) i++;
    if (!known[i]) {
      set_err(err, errlen, "%s: unknown field \"%s\"", where, it->string);
      return -1;
    }
  }
  return 0;
}

/* ====================================================== user profiles: binds */

/* The sandbox side of a bind: absolute, clean, and clear of the sandbox's own areas. */
static int check_bind_target(const char *target, const char *where, char *err, size_t errlen) {
  if (!is_clean_absolute(target)) {
    set_err(err, errlen, "%s.sandbox: must be a clean absolute path", where);
    return -1;
  }
  const char *reserved = reserved_overlap(target);
  if (reserved) {
    set_err(err, errlen, "%s.sandbox: \"%s\" would cover the sandbox's own %s", where, target, reserved);
    return -1;
  }
  return 0;
}

static int parse_bind(const cJSON *item, bind_mount *b, const char *where, char *err, size_t errlen) {
  static const char *const keys[] = {"host", "sandbox", "writable", NULL};
  if (!cJSON_IsObject(item)) {
    set_err(err, errlen, "%s: must be an object", where);
    return -1;
  }
  if (check_keys(item, keys, where, err, errlen) < 0) return -1;
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(item, "host");
  const cJSON *sandbox = cJSON_GetObjectItemCaseSensitive(item, "sandbox");
  const cJSON *writable = cJSON_GetObjectItemCaseSensitive(item, "writable");
  if (!cJSON_IsString(host) || !is_clean_absolute(host->valuestring)) {
    set_err(err, errlen, "%s.host: must be a clean absolute path", where);
    return -1;
  }
  const char *target = sandbox ? (cJSON_IsString(sandbox) ? sandbox->valuestring : "") : host->valuestring;
  if (check_bind_target(target, where, err, errlen) < 0) return -1;
  if (writable && !cJSON_IsBool(writable)) {
    set_err(err, errlen, "%s.writable: must be true or false", where);
    return -1;
  }
  b->host_path = xstrdup(host->valuestring);
  b->sandbox_path = xstrdup(target);
  b->writable = cJSON_IsTrue(writable);
  return 0;
}

static int parse_binds(profile *p, const cJSON *binds, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsArray(binds)) {
    set_err(err, errlen, "%s.binds: must be an array", where);
    return -1;
  }
  if (p->isolation != ISOLATION_NAMESPACES || p->automatic) {
    set_err(err, errlen, "%s.binds: binds need a bwrap base profile", where);
    return -1;
  }
  size_t n = (size_t)cJSON_GetArraySize(binds);
  bind_mount *grown = realloc(p->binds, (p->nbinds + n + 1) * sizeof *grown);
  if (!grown) abort();
  p->binds = grown;
  size_t i = 0;
  for (const cJSON *it = binds->child; it; it = it->next, i++) {
    char item_where[1024];
    snprintf(item_where, sizeof item_where, "%s.binds[%zu]", where, i + 1);
    if (parse_bind(it, &p->binds[p->nbinds], item_where, err, errlen) < 0) return -1;
    p->nbinds++;
  }
  return 0;
}

/* ====================================================== user profiles: env */

/* Replaces the entry for the same key or appends "KEY=VALUE". */
static void env_set(profile *p, const char *key, const char *value) {
  size_t klen = strlen(key), n = 0;
  char *entry = xcalloc(klen + strlen(value) + 2, 1);
  sprintf(entry, "%s=%s", key, value);
  for (; p->env[n]; n++) {
    if (strncmp(p->env[n], key, klen) == 0 && p->env[n][klen] == '=') {
      free(p->env[n]);
      p->env[n] = entry;
      return;
    }
  }
  char **grown = realloc(p->env, (n + 2) * sizeof *grown);
  if (!grown) abort();
  grown[n] = entry;
  grown[n + 1] = NULL;
  p->env = grown;
}

static int parse_env(profile *p, const cJSON *env, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsObject(env)) {
    set_err(err, errlen, "%s.env: must be an object of strings", where);
    return -1;
  }
  for (const cJSON *it = env->child; it; it = it->next) {
    if (it->string[0] == '\0' || strchr(it->string, '=')) {
      set_err(err, errlen, "%s.env: invalid variable name \"%s\"", where, it->string);
      return -1;
    }
    if (!cJSON_IsString(it)) {
      set_err(err, errlen, "%s.env.%s: must be a string", where, it->string);
      return -1;
    }
    env_set(p, it->string, it->valuestring);
  }
  return 0;
}

/* ====================================================== user profiles: limits */

typedef struct limit_field {
  const char *key;
  size_t offset;
  bool is_disk;   /* uint64_t, not rlim_t */
} limit_field;

static const limit_field limit_fields[] = {
  {"cpu_seconds", offsetof(limits, cpu_seconds), false},
  {"address_space", offsetof(limits, address_space), false},
  {"open_files", offsetof(limits, open_files), false},
  {"processes", offsetof(limits, processes), false},
  {"file_size", offsetof(limits, file_size), false},
  {"disk_bytes", offsetof(limits, disk_bytes), true},
  {"disk_inodes", offsetof(limits, disk_inodes), true},
  {NULL, 0, false},
};

/* JSON numbers are doubles: accept whole numbers from 1 up to 2^53. */
static bool whole_positive(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 9007199254740992.0 &&
         (double)(uint64_t)v->valuedouble == v->valuedouble;
}

static int set_limit(limits *l, const cJSON *v, const char *where, char *err, size_t errlen) {
  const limit_field *f = limit_fields;
  while (f->key && strcmp(f->key, v->string) != 0) f++;
  if (!f->key) {
    set_err(err, errlen, "%s.limits: unknown limit \"%s\"", where, v->string);
    return -1;
  }
  if (!whole_positive(v)) {
    set_err(err, errlen, "%s.limits.%s: must be a whole number >= 1", where, v->string);
    return -1;
  }
  char *field = (char *)l + f->offset;
  if (f->is_disk) *(uint64_t *)field = (uint64_t)v->valuedouble;
  else *(rlim_t *)field = (rlim_t)v->valuedouble;
  return 0;
}

static int parse_limits(profile *p, const cJSON *lim, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsObject(lim)) {
    set_err(err, errlen, "%s.limits: must be an object", where);
    return -1;
  }
  for (const cJSON *it = lim->child; it; it = it->next)
    if (set_limit(&p->limits, it, where, err, errlen) < 0) return -1;
  return 0;
}

/* ====================================================== user profiles: one entry */

static int parse_network(profile *p, const cJSON *net, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsBool(net)) {
    set_err(err, errlen, "%s.network: must be true or false", where);
    return -1;
  }
  /* Without namespaces there is no way to take the network away: fail closed. */
  if (cJSON_IsFalse(net) && (p->isolation != ISOLATION_NAMESPACES || p->automatic)) {
    set_err(err, errlen, "%s.network: false needs a bwrap base profile", where);
    return -1;
  }
  p->network = cJSON_IsTrue(net);
  return 0;
}

/* The base profile: "base" if given, else "PROVIDER/default" of the profile's own name. */
static const profile *find_base(const cJSON *item, const char *name, const char *where,
                                char *err, size_t errlen) {
  const cJSON *base = cJSON_GetObjectItemCaseSensitive(item, "base");
  char implied[256];
  if (base && !cJSON_IsString(base)) {
    set_err(err, errlen, "%s.base: must be a profile name", where);
    return NULL;
  }
  if (!base) snprintf(implied, sizeof implied, "%.*s/default", (int)strcspn(name, "/"), name);
  const char *wanted = base ? base->valuestring : implied;
  const profile *found = profile_find_full(wanted);
  if (!found) set_err(err, errlen, "%s.base: unknown profile \"%s\"", where, wanted);
  return found;
}

static int check_name(const cJSON *name, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsString(name) || !valid_profile_name(name->valuestring)) {
    set_err(err, errlen, "%s.name: must be \"provider/name\"", where);
    return -1;
  }
  if (is_builtin_name(name->valuestring) || profile_find_full(name->valuestring)) {
    set_err(err, errlen, "%s.name: profile \"%s\" is already defined", where, name->valuestring);
    return -1;
  }
  return 0;
}

/*
** A name under a built-in provider promises that provider's isolation:
** "bwrap/x" built on local/default would read as sandboxed and not be.
*/
static int check_name_matches_base(const char *name, const profile *base, const char *where,
                                   char *err, size_t errlen) {
  size_t plen = strcspn(name, "/");
  bool ok = true;
  if (strncmp(name, "bwrap/", 6) == 0) ok = base->isolation == ISOLATION_NAMESPACES && !base->automatic;
  else if (strncmp(name, "local/", 6) == 0) ok = base->isolation == ISOLATION_NONE;
  else if (strncmp(name, "auto/", 5) == 0) ok = base->automatic;
  if (!ok)
    set_err(err, errlen, "%s.base: a \"%.*s/...\" profile cannot be based on %s", where, (int)plen,
            name, base->name);
  return ok ? 0 : -1;
}

/* A root file system for the sandbox: an absolute directory, and only where namespaces make one. */
static int parse_root(profile *p, const cJSON *root, const char *where, char *err, size_t errlen) {
  if (!cJSON_IsString(root) || !is_clean_absolute(root->valuestring) || strcmp(root->valuestring, "/") == 0) {
    set_err(err, errlen, "%s.root: must be a clean absolute path other than \"/\"", where);
    return -1;
  }
  if (p->isolation != ISOLATION_NAMESPACES || p->automatic) {
    set_err(err, errlen, "%s.root: needs a bwrap base profile", where);
    return -1;
  }
  free(p->root);
  p->root = xstrdup(root->valuestring);
  return 0;
}

static int parse_fields(profile *p, const cJSON *item, const char *where, char *err, size_t errlen) {
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(item, "root")) && parse_root(p, v, where, err, errlen) < 0)
    return -1;
  if ((v = cJSON_GetObjectItemCaseSensitive(item, "network")) && parse_network(p, v, where, err, errlen) < 0)
    return -1;
  if ((v = cJSON_GetObjectItemCaseSensitive(item, "binds")) && parse_binds(p, v, where, err, errlen) < 0)
    return -1;
  if ((v = cJSON_GetObjectItemCaseSensitive(item, "env")) && parse_env(p, v, where, err, errlen) < 0)
    return -1;
  if ((v = cJSON_GetObjectItemCaseSensitive(item, "limits")) && parse_limits(p, v, where, err, errlen) < 0)
    return -1;
  return 0;
}

static int parse_profile(const cJSON *item, const char *where, char *err, size_t errlen) {
  static const char *const keys[] = {"name", "base", "network", "binds", "env", "limits", "root", NULL};
  if (!cJSON_IsObject(item)) {
    set_err(err, errlen, "%s: must be an object", where);
    return -1;
  }
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
  if (check_keys(item, keys, where, err, errlen) < 0 || check_name(name, where, err, errlen) < 0)
    return -1;
  const profile *base = find_base(item, name->valuestring, where, err, errlen);
  if (!base || check_name_matches_base(name->valuestring, base, where, err, errlen) < 0) return -1;
  profile p;
  profile_derive(&p, base, name->valuestring);
  if (parse_fields(&p, item, where, err, errlen) < 0) {
    profile_clear(&p);
    return -1;
  }
  *profile_append() = p;
  return 0;
}

/* ====================================================== loading the file */

static char *read_whole_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    set_err(err, errlen, "profiles file %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = xcalloc(PROFILES_FILE_MAX + 1, 1);
  size_t n = fread(buf, 1, PROFILES_FILE_MAX + 1, f);
  bool failed = ferror(f);
  fclose(f);
  if (failed || n > PROFILES_FILE_MAX) {
    set_err(err, errlen, "profiles file %s: %s", path, failed ? "read error" : "larger than 1 MiB");
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

/*
** JSON text is UTF-8, and cJSON takes any bytes: a name, path or value
** that is not UTF-8 would reach replies and messages only repaired, no
** longer what the file said. A NUL byte would end the parse early, and
** what follows it would go unread.
*/
static int check_text(const char *text, size_t len, const char *path, char *err, size_t errlen) {
  size_t bad;
  const char *nul = memchr(text, '\0', len);
  if (nul) {
    set_err(err, errlen, "profiles file %s: a NUL byte at offset %zu", path, (size_t)(nul - text));
    return -1;
  }
  if (!utf8_valid(text, len, &bad)) {
    set_err(err, errlen, "profiles file %s: not valid UTF-8 (byte 0x%02x at offset %zu)", path,
            (unsigned char)text[bad], bad);
    return -1;
  }
  return 0;
}

static int parse_document(const cJSON *doc, const char *path, char *err, size_t errlen) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, "profiles");
  if (!cJSON_IsObject(doc) || !cJSON_IsArray(list)) {
    set_err(err, errlen, "profiles file %s: expected {\"profiles\": [...]}", path);
    return -1;
  }
  size_t i = 0;
  for (const cJSON *it = list->child; it; it = it->next, i++) {
    char where[512];
    snprintf(where, sizeof where, "profiles file %.300s: profiles[%zu]", path, i + 1);
    if (parse_profile(it, where, err, errlen) < 0) return -1;
  }
  return 0;
}

/*
** The kernel cannot cap a session's total disk use for an ordinary user,
** but it can cap each file: no command may write a file larger than the
** session's whole allowance. Done after loading so that a derived profile
** starts from its base's own file_size, not from a folded one.
*/
static void fold_disk_into_file_size(void) {
  profile_table *t = table();
  for (size_t i = 0; i < t->n; i++) {
    limits *l = &t->all[i].limits;
    if (l->disk_bytes && (l->file_size == RLIM_INFINITY || l->file_size > l->disk_bytes))
      l->file_size = (rlim_t)l->disk_bytes;
  }
}

static int load_user_file(const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = read_whole_file(path, &len, err, errlen);
  if (!text) return -1;
  if (check_text(text, len, path, err, errlen) < 0) {
    free(text);
    return -1;
  }
  cJSON *doc = cJSON_Parse(text);
  int rc = -1;
  if (!doc) {
    const char *at = cJSON_GetErrorPtr();
    set_err(err, errlen, "profiles file %s: invalid JSON at character %ld", path,
            at ? (long)(at - text) + 1 : 0L);
  } else {
    rc = parse_document(doc, path, err, errlen);
  }
  cJSON_Delete(doc);
  free(text);
  return rc;
}

/* ====================================================== public API */

/*
** path NULL falls back to $SMOLWF_PROFILES so every caller honours it the
** same way. On failure nothing is kept but the built-ins are reloaded, so a
** caller that decides to carry on still has a consistent table.
*/
int profiles_load(const char *path, char *err, size_t errlen) {
  profiles_free();
  add_builtins();
  if (!path) path = getenv("SMOLWF_PROFILES");
  if (!path || !*path) return 0;
  if (load_user_file(path, err, errlen) == 0) {
    fold_disk_into_file_size();
    return 0;
  }
  profiles_free();
  add_builtins();
  return -1;
}

const profile *profile_find(const char *provider, const char *name) {
  if (!provider || !name) return NULL;
  size_t plen = strlen(provider);
  profile_table *t = table();
  for (size_t i = 0; i < t->n; i++) {
    const char *full = t->all[i].name;
    if (strncmp(full, provider, plen) == 0 && full[plen] == '/' && strcmp(full + plen + 1, name) == 0)
      return &t->all[i];
  }
  return NULL;
}

const profile *profiles_all(size_t *count) {
  profile_table *t = table();
  *count = t->n;
  return t->all;
}

void profiles_free(void) {
  provider *ctx = provider_ctx();
  profile_table *t = ctx->profiles;
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) profile_clear(&t->all[i]);
  free(t->all);
  free(t);
  ctx->profiles = NULL;
}
