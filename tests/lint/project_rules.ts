/**
 * @module
 * The project's own lint rules, run by `deno lint` (deno.json `lint.plugins`)
 * and so by CI.
 *
 * `max-function-lines`: no function, method, arrow function or top-level
 * `if (import.meta.main)` block under `actors/` or `scenarios/` spans more
 * than {@linkcode MAX_FUNCTION_LINES} lines, counted from its first to its
 * last line (nested functions count inside their parents, comments included).
 */

/** The longest a product function may be, in lines. */
export const MAX_FUNCTION_LINES = 80;

/** Directories the length rule applies to (product code). */
const PRODUCT = /\/(actors|scenarios)\//;

function lineStarts(text: string): number[] {
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 10) starts.push(i + 1);
  return starts;
}

function lineAt(starts: readonly number[], offset: number): number {
  let lo = 0, hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= offset) lo = mid;
    else hi = mid - 1;
  }
  return lo + 1;
}

function isImportMetaMain(node: Deno.lint.Expression): boolean {
  return node.type === "MemberExpression" && node.object.type === "MetaProperty" &&
    node.property.type === "Identifier" && node.property.name === "main";
}

const plugin: Deno.lint.Plugin = {
  name: "project",
  rules: {
    "max-function-lines": {
      create(context) {
        if (!PRODUCT.test(context.filename.replaceAll("\\", "/"))) return {};
        let starts: number[] | undefined;
        const check = (node: Deno.lint.Node, what: string) => {
          starts ??= lineStarts(context.sourceCode.text);
          const [from, to] = node.range;
          const lines = lineAt(starts, Math.max(from, to - 1)) - lineAt(starts, from) + 1;
          if (lines > MAX_FUNCTION_LINES) {
            context.report({
              node,
              message: `${what} spans ${lines} lines; the limit is ${MAX_FUNCTION_LINES}`,
            });
          }
        };
        return {
          FunctionDeclaration: (node) => check(node, `function ${node.id?.name ?? "(anonymous)"}`),
          FunctionExpression: (node) => {
            if (node.parent.type !== "MethodDefinition") check(node, "function expression");
          },
          ArrowFunctionExpression: (node) => check(node, "arrow function"),
          MethodDefinition: (node) =>
            check(node, `method ${node.key.type === "Identifier" ? node.key.name : "(computed)"}`),
          IfStatement: (node) => {
            if (node.parent.type === "Program" && isImportMetaMain(node.test)) {
              check(node, "if (import.meta.main)");
            }
          },
        };
      },
    },
  },
};

export default plugin;
