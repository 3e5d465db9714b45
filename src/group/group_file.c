/*
 * Group files: how a server job tells clients outside it where its ranks
 * are (hm_group_write_file / hm_group_create_file).
 *
 *   # hermod group NAME version V
 *   RANK URI          (or just URI: its rank is the number of ranks before it)
 *
 * Written to a temporary file and renamed, so a reader sees all or nothing.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group/group_internal.h"
#include "util/log.h"

#define GFILE_LINE_MAX 2048

hm_return_t hm_group_write_file(const hm_group_t *group, const char *path)
{
    if (group == NULL || path == NULL || path[0] == '\0')
        return HM_INVALID_ARG;
    size_t len = strlen(path) + 16;
    char *tmp = malloc(len);
    if (tmp == NULL)
        return HM_NOMEM;
    snprintf(tmp, len, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: cannot write %s: %s", tmp,
                strerror(errno));
        free(tmp);
        return HM_NOENTRY;
    }
    fprintf(f, "# hermod group %s version %u\n", group->g_name, group->g_version);
    for (uint32_t i = 0; i < group->g_size; i++)
        fprintf(f, "%u %s\n", group->g_members[i].m_rank, group->g_members[i].m_uri);
    bool failed = ferror(f) != 0;
    failed |= fclose(f) != 0;
    if (!failed && rename(tmp, path) != 0)
        failed = true;
    if (failed) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: cannot write %s: %s", path,
                strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return failed ? HM_TRANSPORT_ERROR : HM_SUCCESS;
}

struct gfile {
    hm_rank_t *ranks;
    char **uris;
    uint32_t count, cap;
    char name[HMI_GROUP_NAME_MAX];
    uint32_t version;
};

static void gfile_free(struct gfile *gf)
{
    for (uint32_t i = 0; i < gf->count; i++)
        free(gf->uris[i]);
    free(gf->uris);
    free(gf->ranks);
}

static hm_return_t gfile_push(struct gfile *gf, hm_rank_t rank, const char *uri)
{
    if (gf->count == gf->cap) {
        uint32_t cap = gf->cap ? gf->cap * 2 : 16;
        hm_rank_t *ranks = realloc(gf->ranks, cap * sizeof(*ranks));
        if (ranks == NULL)
            return HM_NOMEM;
        gf->ranks = ranks;
        char **uris = realloc(gf->uris, cap * sizeof(*uris));
        if (uris == NULL)
            return HM_NOMEM;
        gf->uris = uris;
        gf->cap = cap;
    }
    gf->uris[gf->count] = strdup(uri);
    if (gf->uris[gf->count] == NULL)
        return HM_NOMEM;
    gf->ranks[gf->count++] = rank;
    return HM_SUCCESS;
}

/* The header's version: 1..UINT32_MAX (0 is hm_group_version's "no group"). */
static hm_return_t gfile_version(struct gfile *gf, const char *text, unsigned int lineno)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = isdigit((unsigned char)text[0]) ? strtoull(text, &end, 10) : 0;
    if (v == 0 || v > UINT32_MAX || errno != 0 || *end != '\0') {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file, line %u: bad version \"%s\"",
                lineno, text);
        return HM_PROTOCOL_ERROR;
    }
    gf->version = (uint32_t)v;
    return HM_SUCCESS;
}

/* One line, newline stripped. */
static hm_return_t gfile_line(struct gfile *gf, char *line, unsigned int lineno)
{
    char name[HMI_GROUP_NAME_MAX];
    char version[24];
    while (isspace((unsigned char)*line))
        line++;
    if (*line == '\0')
        return HM_SUCCESS;
    if (*line == '#') {
        if (sscanf(line, "# hermod group %63s version %23s", name, version) == 2) {
            strcpy(gf->name, name);
            return gfile_version(gf, version, lineno);
        }
        return HM_SUCCESS;
    }
    hm_rank_t rank = gf->count;
    char *uri = line;
    if (isdigit((unsigned char)*line)) {
        char *end;
        unsigned long r = strtoul(line, &end, 10);
        if (!isspace((unsigned char)*end) || r >= HM_RANK_NONE) {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file, line %u: bad rank", lineno);
            return HM_PROTOCOL_ERROR;
        }
        rank = (hm_rank_t)r;
        uri = end;
        while (isspace((unsigned char)*uri))
            uri++;
    }
    size_t len = strlen(uri);
    while (len > 0 && isspace((unsigned char)uri[len - 1]))
        uri[--len] = '\0';
    if (len == 0 || strchr(uri, ' ') != NULL) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file, line %u: no URI", lineno);
        return HM_PROTOCOL_ERROR;
    }
    for (uint32_t i = 0; i < gf->count; i++) {
        if (gf->ranks[i] == rank) {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file, line %u: rank %u again",
                    lineno, rank);
            return HM_PROTOCOL_ERROR;
        }
    }
    return gfile_push(gf, rank, uri);
}

static hm_return_t gfile_read(const char *path, struct gfile *gf)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group: cannot open %s: %s", path,
                strerror(errno));
        return HM_NOENTRY;
    }
    char line[GFILE_LINE_MAX];
    unsigned int lineno = 0;
    hm_return_t ret = HM_SUCCESS;
    while (ret == HM_SUCCESS && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file, line %u: too long", lineno);
            ret = HM_PROTOCOL_ERROR;
            break;
        }
        ret = gfile_line(gf, line, lineno);
    }
    fclose(f);
    if (ret == HM_SUCCESS && gf->count == 0) {
        hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR, "group file %s lists no rank", path);
        ret = HM_PROTOCOL_ERROR;
    }
    return ret;
}

hm_return_t hm_group_create_file(hm_context_t *ctx, const char *path, hm_rank_t self,
                                 const hm_group_opts_t *opts, hm_group_t **group_out)
{
    if (ctx == NULL || path == NULL || group_out == NULL)
        return HM_INVALID_ARG;
    struct gfile gf = {.version = 1};
    strcpy(gf.name, HM_GROUP_NAME_DEFAULT);
    hm_return_t ret = gfile_read(path, &gf);
    if (ret == HM_SUCCESS)
        ret = hmi_group_new(ctx, gf.ranks, (const char *const *)gf.uris, gf.count, self, opts,
                            gf.name, gf.version, group_out);
    gfile_free(&gf);
    return ret;
}
