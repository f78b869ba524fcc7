/**
 * @module
 * Rasterises a chart's SVG to PNG with resvg, a native module: loading it
 * needs `--allow-ffi` and `--allow-sys`, so only what writes a sweep's
 * outputs imports this file.
 */
import { Resvg } from "@resvg/resvg-js";

/** Rasterises a chart's SVG to PNG at 2× with the system fonts. */
export function toPng(svg: string): Uint8Array {
  return new Resvg(svg, {
    font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" },
    fitTo: { mode: "zoom", value: 2 },
    background: "white",
  }).render().asPng();
}
