/* um-memory-page.h — live RAM (and VRAM) graph and a per-component breakdown. */
#pragma once

#include <adwaita.h>

#include "um-memory-monitor.h"

G_BEGIN_DECLS

#define UM_TYPE_MEMORY_PAGE (um_memory_page_get_type ())
G_DECLARE_FINAL_TYPE (UmMemoryPage, um_memory_page, UM, MEMORY_PAGE, AdwBin)

void um_memory_page_set_monitor (UmMemoryPage *self, UmMemoryMonitor *monitor);

G_END_DECLS
