#pragma once
// The emulator's stand-in for the HIP runtime header (see ../rlk_emu_runtime.h).
#include "../rlk_emu_runtime.h"

RLK_EMU_RUNTIME_NAMES(hip)
