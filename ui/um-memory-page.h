/* um-memory-page.h — live RAM (and VRAM) graph and a per-component breakdown. */
#pragma once

#include <adwaita.h>

#include "um-memory-monitor.h"

G_BEGIN_DECLS

#define UM_TYPE_MEMORY_PAGE (um_memory_page_get_type ())
G_DECLARE_FINAL_TYPE (UmMemoryPage, um_memory_page, UM, MEMORY_PAGE, AdwBin)

void um_memory_page_set_monitor (UmMemoryPage *self, UmMemoryMonitor *monitor);
/* While the window's model runs on a server (@server: its address; NULL:
 * here), the page says that it shows this computer's memory. */
void        um_memory_page_set_remote (UmMemoryPage *self, const char *server);
/* What it says then, or NULL (for tests). */
const char *um_memory_page_get_remote_note (UmMemoryPage *self);

G_END_DECLS
