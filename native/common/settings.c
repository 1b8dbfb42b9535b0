/* The table of pycoll's environment variables (settings.h's list), the one parser and checker of their
 * values, and the C readers over it. */
#include "common/settings.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pycoll_setting_t settings[SETTING_COUNT] = {
#define PYCOLL_SETTING_ROW(id, type, default_value, choices, min, power_of_two, doc)                               \
    [SETTING_##id] = {"PYCOLL_" #id, PYCOLL_SETTING_##type, default_value, choices, min, power_of_two, doc},
    PYCOLL_SETTING_LIST(PYCOLL_SETTING_ROW)
#undef PYCOLL_SETTING_ROW
};

const pycoll_setting_t *pycoll_settings(int32_t *count)
{
    if (count)
        *count = SETTING_COUNT;
    return settings;
}

const char *setting_text(setting_id_t id)
{
    const char *value = getenv(settings[id].name);
    return value && value[0] ? value : settings[id].default_value;
}

int setting_flag(setting_id_t id)
{
    const char *value = setting_text(id);
    return value != NULL && strcmp(value, "1") == 0;
}

void pycoll_setting_expects(const pycoll_setting_t *s, char *out, size_t len)
{
    const char *pow2 = s->power_of_two ? " that is a power of two" : "";
    switch (s->type) {
    case PYCOLL_SETTING_INT:
        if (isinf(s->min))
            snprintf(out, len, "a whole number%s", pow2);
        else
            snprintf(out, len, "a whole number of at least %lld%s", (long long)s->min, pow2);
        return;
    case PYCOLL_SETTING_FLOAT:
        if (isinf(s->min))
            snprintf(out, len, "a number");
        else
            snprintf(out, len, "a number of at least %g", s->min);
        return;
    case PYCOLL_SETTING_FLAG:
        snprintf(out, len, "1 (on) or 0 (off)");
        return;
    case PYCOLL_SETTING_CHOICE: {
        int n = snprintf(out, len, "one of ");
        for (const char *c = s->choices; *c && n >= 0 && (size_t)n + 2 < len; c++)
            n += *c == '|' ? snprintf(out + n, len - (size_t)n, ", ") : snprintf(out + n, len - (size_t)n, "%c", *c);
        return;
    }
    default:
        snprintf(out, len, "text");
    }
}

/* text as Python's repr() writes a str, so that the C message and Python's SettingError read the same. */
static void quote(const char *text, char *out, size_t len)
{
    const char q = strchr(text, '\'') && !strchr(text, '"') ? '"' : '\'';
    size_t n = 0;
    out[n++] = q;
    for (const unsigned char *c = (const unsigned char *)text; *c && n + 6 < len; c++) {
        const char *escape = *c == '\n' ? "\\n" : *c == '\t' ? "\\t" : *c == '\r' ? "\\r" : *c == '\\' ? "\\\\" : NULL;
        if (escape)
            n += (size_t)snprintf(out + n, len - n, "%s", escape);
        else if (*c == q)
            n += (size_t)snprintf(out + n, len - n, "\\%c", q);
        else if (*c < 0x20 || *c == 0x7f)
            n += (size_t)snprintf(out + n, len - n, "\\x%02x", *c);
        else
            out[n++] = (char)*c;
    }
    out[n++] = q;
    out[n] = 0;
}

static int choice_is(const char *choices, const char *text)
{
    const size_t n = strlen(text);
    for (const char *c = choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL)
        if (strncmp(c, text, n) == 0 && (c[n] == '|' || c[n] == 0) && n > 0)
            return 1;
    return 0;
}

/* 1 when text is a valid value of s, its typed value into *v. */
static int parse_value(const pycoll_setting_t *s, const char *text, pycoll_setting_value_t *v)
{
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case PYCOLL_SETTING_FLAG:
        v->integer = text[0] == '1';
        return (text[0] == '0' || text[0] == '1') && text[1] == 0;
    case PYCOLL_SETTING_CHOICE:
        return choice_is(s->choices, text);
    case PYCOLL_SETTING_INT:
        v->integer = strtoll(text, &end, 10);
        v->number = (double)v->integer;
        return errno == 0 && end != text && *end == 0 && v->number >= s->min &&
               !(s->power_of_two && (v->integer <= 0 || (v->integer & (v->integer - 1))));
    case PYCOLL_SETTING_FLOAT:
        v->number = strtod(text, &end); /* decimal only: no hexadecimal floats, no nan */
        return errno == 0 && end != text && *end == 0 && !strpbrk(text, "xX") && !isnan(v->number) &&
               v->number >= s->min;
    default:
        return 1;
    }
}

pycoll_status_t pycoll_setting_parse(const pycoll_setting_t *s, const char *text, pycoll_setting_value_t *value,
                                     char *error, size_t error_len)
{
    pycoll_setting_value_t v = {0, 0.0};
    if (text && parse_value(s, text, &v)) {
        if (value)
            *value = v;
        return PYCOLL_OK;
    }
    char quoted[256], expects[256];
    quote(text ? text : "", quoted, sizeof quoted);
    pycoll_setting_expects(s, expects, sizeof expects);
    if (error && error_len)
        snprintf(error, error_len, "%s=%s: expected %s", s->name, quoted, expects);
    return PYCOLL_ERR_INVALID;
}

pycoll_status_t pycoll_settings_check(char *error, size_t error_len)
{
    for (int i = 0; i < SETTING_COUNT; i++) {
        const char *text = getenv(settings[i].name);
        if (text && text[0] && pycoll_setting_parse(&settings[i], text, NULL, error, error_len) != PYCOLL_OK)
            return PYCOLL_ERR_INVALID;
    }
    return PYCOLL_OK;
}
