// Checks that the page can be read where it is drawn: nothing off the window's right edge, and
// every piece of text at WCAG AA contrast against what lies under it. Runs in the page and
// returns what fails, so a test's message names the elements (tag#id.first-class).

// Returns {scrollWidth (how wide the document scrolls), past (every element drawn past the
// window's right edge), background (the page's, [r, g, b, alpha]), lowContrast}. lowContrast: every element with text of its own (HTML or
// SVG), shown and not disabled, whose colour (an SVG text's fill) against its background falls
// below WCAG AA: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold); the background is the
// element's own and its ancestors', translucent ones laid over what is under them, down to the
// page's, and an SVG text's is its nearest HTML ancestor's (the chart's labels sit beside their
// bars, not on them); lines 'ratio < needed: element "text" colour on background'.
export function readability(p) {
  return p.evaluate(() => {
    const name = (el) => `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${typeof el.className === 'string' && el.className ? `.${el.className.split(' ')[0]}` : ''}`;
    /** @param {string} c @returns {number[] | null} [r, g, b, alpha] */
    const parse = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      if (!m) return null;
      const v = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
      return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
    };
    const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3])).concat(1);
    // WCAG 2's relative luminance of an sRGB colour.
    const luminance = (c) => {
      const lin = (x) => (x / 255 <= 0.03928 ? x / 255 / 12.92 : ((x / 255 + 0.055) / 1.055) ** 2.4);
      return 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
    };
    const background = (el) => {
      const layers = [];
      for (let e = el; e; e = e.parentElement) {
        if (e instanceof SVGElement) continue;
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c[3] > 0) layers.push(c);
        if (c && c[3] >= 1) break;
      }
      let under = [255, 255, 255, 1];
      if (!layers.length || layers[layers.length - 1][3] < 1) under = parse(getComputedStyle(document.documentElement).backgroundColor) ?? under;
      for (const layer of layers.reverse()) under = over(layer, under);
      return under;
    };
    const low = [];
    for (const el of document.querySelectorAll('body *')) {
      if (!el.getClientRects().length || el.closest(':disabled, .sr-only, option')) continue;
      if (![...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent?.trim())) continue;
      const style = getComputedStyle(el);
      if (style.visibility === 'hidden') continue;
      const ink = parse(el instanceof SVGElement ? style.fill : style.color);
      if (!ink) continue;
      const bg = background(el);
      const [a, b] = [luminance(over(ink, bg)), luminance(bg)];
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      const size = parseFloat(style.fontSize);
      const needed = size >= 24 || (Number(style.fontWeight) >= 700 && size >= 18.66) ? 3 : 4.5;
      if (ratio < needed) {
        low.push(`${ratio.toFixed(2)} < ${needed}: ${name(el)} ${JSON.stringify(el.textContent?.trim().slice(0, 30))} ${ink.join(',')} on ${bg.map(Math.round).join(',')}`);
      }
    }
    return {
      scrollWidth: document.documentElement.scrollWidth,
      past: [...document.querySelectorAll('body *')]
        .filter((e) => e.getClientRects().length > 0 && e.getBoundingClientRect().right > window.innerWidth + 0.5)
        .map(name),
      background: parse(getComputedStyle(document.documentElement).backgroundColor),
      lowContrast: low,
    };
  });
}
