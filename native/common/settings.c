/* The table of pycoll's environment variables (settings.h's list) and the C readers over it. */
#include "common/settings.h"

#include <math.h>
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
